"""Printing the ``engine`` benchmark's report: a table per side, the ratios and the verdict."""

from __future__ import annotations

from bench.engine_overhead.measure import EngineOverheadReport


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}x"


def title(report: EngineOverheadReport) -> str:
    return (
        f"engine overhead: {report.iterations} iterations per run, "
        f"{report.rounds} interleaved rounds, median per step"
    )


def summary_lines(report: EngineOverheadReport) -> list[str]:
    """The ratios and the verdict, one per line (wall-clock ratios; CPU-time ones in brackets)."""
    lines = [
        f"engine/plain     = {_ratio(report.engine_vs_plain)}  (cpu: {_ratio(report.engine_vs_plain_cpu)})"
        "  engine per-step time over plain Python doing the same work",
    ]
    if report.langgraph is None:
        lines.append(f"langgraph/engine = n/a  LangGraph not measured: {report.langgraph_missing}")
        lines.append(f"target: langgraph/engine >= {report.target_ratio:g}x -> NOT CHECKED")
        return lines
    lines.append(
        f"langgraph/engine = {_ratio(report.langgraph_vs_engine)}  "
        f"(cpu: {_ratio(report.langgraph_vs_engine_cpu)}; "
        f"net of the plain-Python work: {_ratio(report.langgraph_vs_engine_net)})"
    )
    verdict = "PASS" if report.passed else "FAIL"
    lines.append(
        f"target: engine per-step overhead at least {report.target_ratio:g}x lower than LangGraph's "
        f"(wall-clock langgraph/engine >= {report.target_ratio:g}x) -> {verdict}"
    )
    return lines


_HEADERS = ("side", "progress", "µs/step", "min", "max", "cpu µs/step", "vs plain")


def _rows(report: EngineOverheadReport) -> list[tuple[str, ...]]:
    plain = report.plain.per_step_us
    return [
        (
            side.label,
            "on" if side.progress else "off",
            f"{side.per_step_us:.2f}",
            f"{side.min_per_step_us:.2f}",
            f"{side.max_per_step_us:.2f}",
            f"{side.cpu_per_step_us:.2f}",
            f"{side.per_step_us / plain:.1f}x",
        )
        for side in report.sides
    ]


def _notes(report: EngineOverheadReport) -> list[str]:
    return [
        "µs/step: wall time of one run / iterations (median, min, max over rounds); "
        "cpu: process CPU time, median",
        *(f"{side.label}: {side.description}" for side in report.sides),
    ]


def render(report: EngineOverheadReport) -> str:
    """The whole report as plain text (what :func:`print_report` prints without ``rich``)."""
    rows = [_HEADERS, *_rows(report)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADERS))]
    lines = [title(report)]
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [cell.rjust(width) for cell, width in zip(row[2:], widths[2:], strict=True)]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    lines += ["", *(f"  {note}" for note in _notes(report)), "", *summary_lines(report)]
    return "\n".join(lines)


def print_report(report: EngineOverheadReport) -> None:
    """Print the report: a ``rich`` table when ``rich`` is importable, plain text otherwise."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(render(report))
        return
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)
    table = Table(title=title(report), title_justify="left")
    for index, header in enumerate(_HEADERS):
        table.add_column(header, justify="left" if index < 2 else "right", no_wrap=True)
    for side, row in zip(report.sides, _rows(report), strict=True):
        table.add_row(*row, style=None if side.primary else "dim")
    console.print(table)
    for note in _notes(report):
        console.print(f"  {note}", highlight=False, markup=False, soft_wrap=True)
    console.print()
    for line in summary_lines(report):
        style = "green" if line.endswith("PASS") else "red" if line.endswith("FAIL") else None
        console.print(line, style=style, highlight=False, markup=False, soft_wrap=True)

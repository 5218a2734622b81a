"""The printed report: a row per side, the ratios and the verdict; text helpers for the profiles."""

from __future__ import annotations

import io
import pstats
import statistics

from bench.celery_overhead.measure import Report
from bench.celery_overhead.rig import CONCURRENCY

PAIRS = (
    ("composite", "fw_composite", "bare_chord", "branch"),
    ("pipeline", "fw_pipeline", "bare_chain", "stage"),
)


HEADERS = (
    "side",
    "tasks",
    "median s",
    "min s",
    "max s",
    "ms/task",
    "CPU ms/task",
    "redis cmds/task",
    "KiB in/task",
)


def table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def render(report: Report) -> str:
    lines = [
        "Celery overhead: framework vs bare canvas, one run, interleaved",
        f"  redis-server (broker + results, private), prefork worker concurrency {CONCURRENCY} "
        f"(log level WARNING), run store {report.store_kind}; {report.rounds} rounds after a warm-up; "
        "wall time from send to result in this client, median over rounds",
        "",
    ]
    rows: list[tuple[str, ...]] = [HEADERS]
    for result in report.results.values():
        side = result.side
        rows.append(
            (
                side.label,
                str(side.tasks),
                f"{result.median:.3f}",
                f"{min(result.seconds):.3f}",
                f"{max(result.seconds):.3f}",
                f"{result.median / side.tasks * 1000:.2f}",
                f"{result.cpu_median / side.tasks * 1000:.2f}",
                f"{statistics.median(result.redis_commands) / side.tasks:.1f}",
                f"{statistics.median(result.redis_bytes) / side.tasks / 1024:.2f}",
            )
        )
    lines += table(rows)
    lines += [
        "",
        "  ms/task = median wall time / tasks executed; CPU = user+system of the worker's main and pool",
        "  processes, redis-server and this client during the run (median over rounds; a PostgreSQL",
        "  server's own CPU is not counted); redis cmds and KiB in = commands Redis ran and bytes it",
        "  received (INFO commandstats / stats, reset before each run).",
        "",
    ]
    for workload, fw_key, bare_key, unit in PAIRS:
        framework, bare = report.results[fw_key], report.results[bare_key]
        units = report.width if workload == "composite" else report.stages
        ratio = report.ratio(workload)
        cpu_ratio = report.cpu_ratio(workload)
        extra_ms = (framework.median - bare.median) / units * 1000
        extra_cpu = (framework.cpu_median - bare.cpu_median) / units * 1000
        target = report.target(workload)
        verdict = "PASS" if ratio <= target else "FAIL"
        lines.append(
            f"{workload:<9} framework/bare = {ratio:.2f}x wall (target <= {target}x), "
            f"{cpu_ratio:.2f}x CPU; overhead per {unit}: {extra_ms:+.2f} ms wall, "
            f"{extra_cpu:+.2f} ms CPU  {verdict}"
        )
        # the two sides of a round ran one after the other: their ratio shares the host's moment
        rounds = [f / b for f, b in zip(framework.seconds, bare.seconds, strict=True)]
        lines.append(
            f"{'':<9} per round: {', '.join(f'{r:.2f}' for r in rounds)}x "
            f"(median {statistics.median(rounds):.2f}x)"
        )
    if report.commit_seconds:
        floor = statistics.median(report.commit_seconds)
        pipeline = report.results["fw_pipeline"].median
        lines.append(
            f"  one durable commit on this PostgreSQL server ({len(report.commit_seconds)} one-row "
            f"autocommit INSERTs, after each round): median {floor * 1000:.2f} ms "
            f"(min {min(report.commit_seconds) * 1000:.2f}, max {max(report.commit_seconds) * 1000:.2f}); "
            f"the pipeline's {report.stages} stages pay one each, {report.stages * floor * 1000:.0f} ms "
            f"at the median, {report.stages * floor / pipeline:.0%} of its median wall time"
        )
    lines += ["", "Redis commands per run, framework / bare (median run; the most frequent):"]
    for workload, fw_key, bare_key, _unit in PAIRS:
        fw, bare = report.results[fw_key], report.results[bare_key]
        top = (fw.redis_top + bare.redis_top).most_common(9)
        cells = ", ".join(
            f"{name} {fw.redis_top[name] // len(fw.seconds)}/{bare.redis_top[name] // len(bare.seconds)}"
            for name, _ in top
        )
        lines.append(f"  {workload}: {cells}")
    verdict = "PASS" if report.passed else "FAIL"
    targets = ", ".join(f"{workload} <= {report.target(workload)}x" for workload in ("composite", "pipeline"))
    lines += ["", f"targets (issues 11, 36): framework/bare wall time {targets}: {verdict}"]
    return "\n".join(lines)


def pstats_text(stats: pstats.Stats, sort: str, limit: int) -> str:
    buffer = io.StringIO()
    stats.stream = buffer  # type: ignore[attr-defined]
    stats.strip_dirs().sort_stats(sort).print_stats(limit)
    text = buffer.getvalue()
    start = text.find("   ncalls")
    return text[start:].rstrip() if start >= 0 else text.rstrip()


def indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())

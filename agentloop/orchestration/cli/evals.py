"""``agentloop eval``: a registered runnable evaluated over a dataset, and two evaluations compared.

::

    agentloop eval RUNNABLE DATASET.jsonl [--scorer SPEC]... [--celery]   (= agentloop eval run ...)
    agentloop eval compare A B            what changed; exits 1 when a case regressed
    agentloop eval list | show ID         the kept evaluations

The runnable is looked up in the deployment's registry (``AGENTLOOP_IMPORTS``) and runs in this
process, or on Celery as one batch with ``--celery``; the scorers are those of
:mod:`~agentloop.orchestration.evals.scorers`. Each evaluation is kept under
``AGENTLOOP_HOME/evals/`` (:mod:`~agentloop.orchestration.evals.keep` says why there) with its code
version and model; ``--write-json`` and ``--write-html`` write its report where asked. Exit codes:
0 the evaluation ran (whatever its cases scored; ``--fail-under RATE`` exits 1 below a pass rate),
1 a regression (``compare``) or a pass rate under ``--fail-under``, 2 bad input, 3 runs still going
at ``--timeout``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.cli.common import (
    EXIT_FAILED,
    EXIT_TIMEOUT,
    celery_app,
    cli_settings,
    console,
    deployment_registry,
    errors,
    fail,
    json_option,
    parse_json,
    print_json,
    print_table,
    progress_bar,
)
from agentloop.orchestration.errors import (
    ContextSpecError,
    EvaluationInputError,
    UnknownRunnableError,
    WorkflowFailedError,
)
from agentloop.orchestration.evals.compare import Comparison, compare_reports
from agentloop.orchestration.evals.dataset import load_dataset
from agentloop.orchestration.evals.evaluation import evaluate, judge_scorer
from agentloop.orchestration.evals.keep import keep_report, kept_reports, load_report, write_json
from agentloop.orchestration.evals.pages import comparison_html, report_html
from agentloop.orchestration.evals.report import CaseResult, EvalReport
from agentloop.orchestration.evals.running import (
    UNFINISHED,
)
from agentloop.orchestration.evals.scorers import Scorer, resolve_scorers
from agentloop.orchestration.evals.verdicts import DEFAULT_THRESHOLD
from agentloop.orchestration.registry import Registration
from agentloop.orchestration.settings import Settings


class EvalGroup(TyperGroup):
    """``agentloop eval RUNNABLE DATASET`` is ``agentloop eval run RUNNABLE DATASET``: a first word
    that names no command of the group is a runnable (a runnable named like one: ``eval run NAME``)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return list(super().parse_args(ctx, args))


evals = typer.Typer(
    help="Evaluate a runnable over a dataset (eval RUNNABLE DATASET), compare two evaluations.",
    no_args_is_help=True,
    cls=EvalGroup,
)

#: The longest output shown in a table's cell (the reports have it whole).
_CELL = 48


def _short(value: Any, limit: int = _CELL) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextmanager
def _bar(title: str, total: int, *, quiet: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar of ``total`` cases (on stderr, and gone when done, under ``--json``); yields
    the callback told how many have ended."""
    with progress_bar(quiet=quiet) as progress:
        task = progress.add_task(title, total=total)
        yield lambda done: progress.update(task, completed=done)


def _registration(settings: Settings, name: str) -> Registration:
    if not settings.imports:
        raise fail(
            f"AGENTLOOP_IMPORTS names no module: set it to the module that registers {name!r} "
            "(only registered runnables run)"
        )
    registry = deployment_registry(settings)
    try:
        return registry.get(name)
    except UnknownRunnableError as error:
        raise fail(str(error)) from None


def _write(
    report_or_comparison: EvalReport | Comparison, json_path: Path | None, html_path: Path | None
) -> None:
    if json_path is not None:
        write_json(json_path, report_or_comparison.to_dict())
        errors.print(f"JSON report: {json_path}", markup=False, soft_wrap=True)
    if html_path is not None:
        page = (
            report_html(report_or_comparison)
            if isinstance(report_or_comparison, EvalReport)
            else comparison_html(report_or_comparison)
        )
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(page, encoding="utf-8")
        errors.print(f"HTML report: {html_path}", markup=False, soft_wrap=True)


def print_report(report: EvalReport) -> None:
    """A row per case, each scorer's mean, and the aggregate."""
    table = Table(title=f"{report.runnable}: {report.id}", title_justify="left")
    for column in ("case", "run", "verdict", *report.scorers, "output"):
        table.add_column(column, overflow="fold")
    for case in report.cases:
        cells = [Text(case.id), Text(case.status + _stopped(case)), _verdict(case.passed)]
        for name in report.scorers:
            score = case.scores.get(name)
            cells.append(
                Text("—")
                if score is None
                else Text(f"{score.value:.2f}" + (f" {_short(score.reason, 60)}" if score.reason else ""))
            )
        cells.append(Text(_short(case.output)))
        table.add_row(*cells)
    console.print(table)
    aggregate = report.aggregate()
    means = ", ".join(f"{name} {values['mean']}" for name, values in aggregate["scorers"].items())
    runs = ", ".join(f"{count} {status}" for status, count in aggregate["runs"].items())
    console.print(
        Text(
            f"passed {aggregate['passed']} of {aggregate['cases']} ({aggregate['pass_rate']:.0%}); "
            f"mean score: {means}; runs: {runs}; tokens {aggregate['input_tokens']}/"
            f"{aggregate['output_tokens']}"
        )
    )
    code = report.code
    console.print(
        Text(
            f"model {report.model.get('description')}; code git {code.get('git') or 'none'}, "
            f"source {str(code.get('source_sha256'))[:12]}, agentloop {code.get('agentloop')}",
            style="dim",
        )
    )


def _stopped(case: CaseResult) -> str:
    """`` (bound)`` for a run a loop's bound stopped, and what the case expected when it differs."""
    mark = " (bound)" if case.stopped_by == "bound" else ""
    if not case.stopped_as_expected:
        mark += f" (expected stopped_by {case.expected_stopped_by})"
    return mark


def _verdict(passed: bool | None) -> Text:
    if passed is None:
        return Text("—")
    return Text("pass", style="green") if passed else Text("FAIL", style="bold red")


@evals.command("run")
def run(
    runnable: str = typer.Argument(..., help="A registered runnable (see AGENTLOOP_IMPORTS)."),
    dataset: Path = typer.Argument(
        ..., help='A JSON Lines file: {"input": ..., "expected": ..., "id": ...}.'
    ),
    scorer: list[str] = typer.Option(
        [],
        "--scorer",
        "-s",
        help="exact, judge, type:MODULE:TYPE or MODULE:FUNCTION (repeatable). Default: exact.",
    ),
    on_celery: bool = typer.Option(False, "--celery", help="Run the cases on Celery, as one batch."),
    context: str | None = typer.Option(None, "--context", "-c", help="The context spec, a JSON object."),
    criteria: str | None = typer.Option(None, help="What the judge checks (with --scorer judge)."),
    judge_model: str | None = typer.Option(None, help="The judge's model (default: AGENTLOOP_MODEL's)."),
    threshold: float = typer.Option(
        DEFAULT_THRESHOLD, min=0.0, max=1.0, help="The least score that passes, for number scores."
    ),
    concurrency: int = typer.Option(4, min=1, max=64, help="Cases run (in-process) and scored at once."),
    timeout: float | None = typer.Option(
        None, min=0.1, help="With --celery: stop waiting after this many seconds."
    ),
    fail_under: float | None = typer.Option(
        None, min=0.0, max=1.0, help="Exit 1 when the pass rate is below this (0 to 1)."
    ),
    write_json_to: Path | None = typer.Option(None, "--write-json", help="Write the report as JSON here."),
    write_html_to: Path | None = typer.Option(
        None, "--write-html", help="Write the report as an HTML page here."
    ),
    as_json: bool = json_option(),
) -> None:
    """Run RUNNABLE over every case of DATASET, score each output, keep and print the results."""
    if timeout is not None and not on_celery:
        raise fail("--timeout needs --celery: in-process runs end when they end")
    spec = parse_json(context, what="--context", default={})
    if not isinstance(spec, dict):
        raise fail("--context must be a JSON object")
    settings = cli_settings()
    registration = _registration(settings, runnable)
    try:
        cases = load_dataset(dataset)
        judge = None
        if "judge" in scorer:
            judge = judge_scorer(settings, model=judge_model, criteria=criteria, threshold=threshold)
        scorers: list[Scorer] = resolve_scorers(scorer, cases=cases.cases, threshold=threshold, judge=judge)
    except EvaluationInputError as error:
        raise fail(str(error)) from None

    def progress(title: str, total: int) -> AbstractContextManager[Callable[[int], None]]:
        return _bar(title, total, quiet=as_json)

    options: dict[str, Any] = {
        "spec": spec,
        "threshold": threshold,
        "criteria": criteria,
        "concurrency": concurrency,
        "timeout": timeout,
        "progress": progress,
    }
    try:
        if on_celery:
            with celery_app(settings) as app:
                celery = (app, dependencies_of(app).store)
                report = evaluate(settings, registration, cases, scorers, celery=celery, **options)
        else:
            report = evaluate(settings, registration, cases, scorers, **options)
    except ContextSpecError as error:
        raise fail(str(error)) from None
    except WorkflowFailedError as error:
        raise fail(f"the batch {error.run_id} failed before its runs: {error}", code=EXIT_FAILED) from None
    kept = keep_report(settings.home, report)
    if as_json:
        print_json(report.to_dict())
    else:
        print_report(report)
        console.print(
            Text(f"kept as {report.id} ({kept}); compare with `agentloop eval compare`", style="dim")
        )
    _write(report, write_json_to, write_html_to)
    if any(case.status == UNFINISHED for case in report.cases):
        raise fail(
            f"runs still going after {timeout}s: their cases are kept as unfinished", code=EXIT_TIMEOUT
        )
    rate = report.aggregate()["pass_rate"]
    if fail_under is not None and rate < fail_under:
        raise fail(f"pass rate {rate:.0%} is under --fail-under {fail_under:.0%}", code=EXIT_FAILED)


def _load(reference: str) -> EvalReport:
    try:
        return load_report(cli_settings().home, reference)
    except EvaluationInputError as error:
        raise fail(str(error)) from None


def print_comparison(comparison: Comparison, *, show_all: bool = False) -> None:
    """Both evaluations, the counts of each kind of change, the changed cases (regressions first)."""
    sides = Table(show_header=True)
    for column in ("", "evaluation", "git", "source", "model", "passed"):
        sides.add_column(column, no_wrap=column == "evaluation", overflow="fold")
    for label, report in (("before", comparison.before), ("after", comparison.after)):
        aggregate = report.aggregate()
        sides.add_row(
            label,
            Text(report.id),
            Text(str(report.code.get("git") or "none")),
            Text(str(report.code.get("source_sha256"))[:12]),
            Text(str(report.model.get("description"))),
            f"{aggregate['passed']}/{aggregate['cases']}",
        )
    print_table(sides)
    if comparison.before.dataset.get("sha256") != comparison.after.dataset.get("sha256"):
        console.print(Text("the two evaluations ran on different datasets", style="yellow"))
    changes = Table(title="changed cases" if not show_all else "cases", title_justify="left")
    for column in ("case", "change", "before", "after", "scores"):
        changes.add_column(column, overflow="fold")
    for change in comparison.changes:
        if change.kind == "same" and not show_all:
            continue
        deltas = ", ".join(
            f"{name} {old:.2f}→{new:.2f} ({new - old:+.2f})" for name, (old, new) in change.scores.items()
        )
        style = {"regressed": "bold red", "worse": "yellow", "fixed": "green", "better": "green"}.get(
            change.kind, ""
        )
        changes.add_row(
            Text(change.id),
            Text(change.kind, style=style),
            Text(f"{_verdict(change.before_passed)} {change.before_status or ''}".strip()),
            Text(f"{_verdict(change.after_passed)} {change.after_status or ''}".strip()),
            Text(deltas),
        )
    print_table(changes)
    _print_outputs(comparison)
    counts = ", ".join(f"{count} {kind}" for kind, count in comparison.counts().items() if count)
    console.print(Text(counts))


def _print_outputs(comparison: Comparison) -> None:
    """The outputs before and after of each regressed or worse case: what changed, not only its score."""
    for change in comparison.changes:
        if change.kind not in ("regressed", "worse"):
            continue
        console.print(
            Text(f"{change.kind} {change.id}:", style="bold red" if change.kind == "regressed" else "yellow")
        )
        for side, output in (("before", change.before_output), ("after", change.after_output)):
            console.print(Text(f"  {side:<6}  {_output_text(output)}"))


def _output_text(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


@evals.command("compare")
def compare(
    before: str = typer.Argument(..., help="The earlier evaluation: an id (or its start) or a report file."),
    after: str = typer.Argument(..., help="The later evaluation."),
    show_all: bool = typer.Option(False, "--all", help="List the unchanged cases too."),
    write_json_to: Path | None = typer.Option(
        None, "--write-json", help="Write the comparison as JSON here."
    ),
    write_html_to: Path | None = typer.Option(None, "--write-html", help="Write it as an HTML page here."),
    as_json: bool = json_option(),
) -> None:
    """What changed from BEFORE to AFTER, case by case; exits 1 when a case that passed now fails."""
    comparison = compare_reports(_load(before), _load(after))
    if as_json:
        print_json(comparison.to_dict())
    else:
        print_comparison(comparison, show_all=show_all)
    _write(comparison, write_json_to, write_html_to)
    regressions = comparison.regressions
    if regressions:
        if not as_json:
            names = ", ".join(change.id for change in regressions[:10])
            errors.print(Text(f"{len(regressions)} regressed: {names}", style="bold red"))
        raise typer.Exit(EXIT_FAILED)


@evals.command("list")
def list_evals(
    limit: int = typer.Option(20, min=1, max=1000, help="How many of the latest evaluations."),
    as_json: bool = json_option(),
) -> None:
    """The kept evaluations, newest first."""
    reports = kept_reports(cli_settings().home, limit=limit)
    if as_json:
        print_json(
            [
                {
                    "id": report.id,
                    "runnable": report.runnable,
                    "created_at": report.created_at,
                    "mode": report.mode,
                    "code": dict(report.code),
                    "model": dict(report.model),
                    "aggregate": report.aggregate(),
                }
                for report in reports
            ]
        )
        return
    table = Table()
    for column in ("evaluation", "runnable", "created", "mode", "passed", "git"):
        table.add_column(column, no_wrap=column in ("evaluation", "created"), overflow="fold")
    for report in reports:
        aggregate = report.aggregate()
        table.add_row(
            Text(report.id),
            Text(report.runnable),
            Text(report.created_at[:19].replace("T", " ")),
            Text(report.mode),
            f"{aggregate['passed']}/{aggregate['cases']}",
            Text(str(report.code.get("git") or "none")),
        )
    print_table(table)


@evals.command("show")
def show(
    evaluation: str = typer.Argument(..., help="An evaluation id (or its start) or a report file."),
    write_json_to: Path | None = typer.Option(None, "--write-json", help="Write the report as JSON here."),
    write_html_to: Path | None = typer.Option(
        None, "--write-html", help="Write the report as an HTML page here."
    ),
    as_json: bool = json_option(),
) -> None:
    """One kept evaluation: its table and aggregate (or its report written as JSON or HTML)."""
    report = _load(evaluation)
    if as_json:
        print_json(report.to_dict())
    else:
        print_report(report)
    _write(report, write_json_to, write_html_to)

"""``agentloop demo``: the main job.

A composite fans several questions out to the record-search agent, a summary
stage merges them, on real Celery (an in-process worker on the embedded
defaults), with a live progress display; then the answers are printed.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.cli.common import (
    EXIT_DEGRADED,
    EXIT_FAILED,
    EXIT_TIMEOUT,
    celery_app,
    cli_settings,
    console,
    errors,
    fail,
    follow,
)
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.llm.provider import ModelProvider, describe_processor
from agentloop.orchestration.redaction import redact_url
from agentloop.orchestration.store import database_url

#: The demo: a registered workflow, and the module that declares it (``AGENTLOOP_IMPORTS`` when
#: that names none). The CLI knows these names only: it runs the demo the way ``trigger`` runs any
#: registered workflow.
DEMO_MODULE = "agentloop.examples.record_search.workflows"
DEMO = "record_search.demo"


def demo(
    question: list[str] = typer.Option(
        [], "--question", "-q", help="Ask this instead of the built-in questions (repeatable)."
    ),
    worker: bool = typer.Option(
        True, "--worker/--no-worker", help="Start a worker thread in this process (off: use running workers)."
    ),
    timeout: float = typer.Option(300.0, min=1, help="Give up after this many seconds."),
) -> None:
    """Run the record-search demo workflow on Celery and print its answers (a run that ended
    degraded exits 4)."""
    settings = cli_settings()
    if not settings.imports:
        settings = settings.model_copy(update={"imports": (DEMO_MODULE,)})
    model = describe_processor(ModelProvider(settings.model).processor())
    with celery_app(settings, start_worker=worker) as app:
        console.print(f"[bold]model[/]    {escape(model)}")
        console.print(
            f"[bold]broker[/]   {redact_url(str(app.conf.broker_url))}"
            + (" (worker thread in this process)" if worker else " (running workers)")
        )
        console.print(f"[bold]database[/] {redact_url(database_url(settings))}")
        console.print(f"[bold]workflow[/] {DEMO}: the questions fanned out, then a summary stage\n")
        store = dependencies_of(app).store
        handle = CeleryAgentRunner.create(runnable=DEMO, context={}, app=app, store=store).request_sync(
            input={"questions": list(question)} if question else {}
        )
        try:
            result = follow(handle, timeout=timeout, title=DEMO)
        except TimeoutError:
            raise fail(f"run {handle.run_id} still running after {timeout:g}s", code=EXIT_TIMEOUT) from None
        except Exception as error:
            raise fail(f"run {handle.run_id} failed: {error}", code=EXIT_FAILED) from None
        status, recorded = handle.status, handle.error

    print_answers(result)
    console.print(f"run id {handle.run_id}: see it again with `agentloop runs show {handle.run_id}`")
    if model.startswith("offline"):
        console.print(
            Text("Text marked [offline model] was written by the offline model, not a real one.", style="dim")
        )
    if status == "degraded":  # model calls failed and fallbacks answered: not a success
        message = recorded.get("message") if isinstance(recorded, dict) else None
        errors.print(f"[yellow]degraded[/]: {escape(str(message or 'model calls failed'))}", soft_wrap=True)
        raise typer.Exit(EXIT_DEGRADED)


def print_answers(result: dict[str, Any]) -> None:
    """One panel per question (its answer and up to five records), then the summary."""
    for entry in result.get("answers", []):
        answer = entry.get("answer") or {}
        body = answer.get("message") or (entry.get("error") or {}).get("message", "(no answer)")
        parts: list[Any] = [Text(str(body))]
        records = answer.get("records") or []
        if records:
            table = Table("category", "record", header_style="dim", box=None)
            for record in records[:5]:
                table.add_row(str(record.get("category", "")), str(record.get("label", record.get("id", ""))))
            if len(records) > 5:
                table.add_row("", f"... {len(records) - 5} more")
            parts.append(table)
        console.print(Panel(Group(*parts), title=escape(str(entry.get("question", ""))), title_align="left"))
    console.print(Text(str(result.get("summary", "")), style="bold"))

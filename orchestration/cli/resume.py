"""``agentloop resume RUN_ID --answer JSON``: answer the question a paused run waits for.

Without ``--answer`` it shows the questions the run waits for (from the run store). With it,
the ``agentloop.resume`` task checks the answer against the question's schema and continues
the run where it stopped. ``--path`` and ``--key`` pick the question when several wait.
Exit codes: 0 accepted, 1 refused (a wrong answer, already answered, no such question; the
run goes on waiting), 2 usage, 3 no worker answered in time.
"""

from __future__ import annotations

from typing import Any

import typer
from celery.exceptions import TimeoutError as CeleryTimeoutError

from agentloop.orchestration.cli.common import (
    EXIT_FAILED,
    EXIT_TIMEOUT,
    celery_app,
    cli_settings,
    console,
    fail,
    json_option,
    parse_json,
    print_json,
    run_store,
)
from agentloop.orchestration.redaction import redact_url
from agentloop.orchestration.store.waits import PENDING, wait_store_for
from agentloop.orchestration.wire import RESUME


def resume(
    run_id: str = typer.Argument(..., help="The run id (the launch task id)."),
    answer: str | None = typer.Option(None, help='The answer, as JSON (true, "a choice", {...}).'),
    path: str | None = typer.Option(None, help="The workflow path of the question (when several wait)."),
    key: str | None = typer.Option(None, help="The question's key (when several wait at one path)."),
    timeout: float = typer.Option(30.0, min=0.1, help="Seconds to wait for a worker's answer."),
    as_json: bool = json_option(),
) -> None:
    """Answer a paused run's question and continue the run, or show what it waits for."""
    settings = cli_settings()
    if answer is None:
        _show_waits(run_id, as_json=as_json)
        return
    value = parse_json(answer, what="--answer")
    kwargs = {"run_id": run_id, "answer": value, "path": path, "key": key}
    with celery_app(settings) as app:
        try:
            result: dict[str, Any] = app.send_task(RESUME, kwargs=kwargs).get(timeout=timeout)
        except (TimeoutError, CeleryTimeoutError):
            raise fail(
                f"no worker answered within {timeout:g}s on {redact_url(str(app.conf.broker_url))}",
                code=EXIT_TIMEOUT,
            ) from None
    if as_json:
        print_json(result)
    elif result.get("accepted"):
        console.print(f"answered; run {run_id} goes on")
    if not result.get("accepted"):
        raise fail(f"refused: {result.get('reason')}", code=EXIT_FAILED)


def _show_waits(run_id: str, *, as_json: bool) -> None:
    waits = wait_store_for(run_store(cli_settings()))
    pending = [] if waits is None else [wait.describe() for wait in waits.waits(run_id, status=PENDING)]
    if as_json:
        print_json(pending)
        return
    if not pending:
        console.print(f"run {run_id} waits for no answer")
    for wait in pending:
        console.print(f"{wait['path'] or '(root)'} [{wait['key']}]: {wait['question']['prompt']}")
        console.print(f"  answer schema: {wait['answer_schema']}", markup=False)

"""``agentloop resume RUN_ID --answer JSON``: answer the question a paused run waits for.

Without ``--answer`` it shows the questions the run waits for (from the run store). With it,
the ``agentloop.resume`` task checks the answer against the question's schema and continues
the run where it stopped. ``--path`` and ``--key`` pick the question when several wait.
Exit codes: 0 accepted, or queued (no worker answered within ``--timeout``: the answer waits
on the broker and is checked when a worker takes it), 1 refused (a wrong answer, already
answered, no such question; the run goes on waiting), 2 usage or no such run.
"""

from __future__ import annotations

from typing import Any

import typer
from celery.exceptions import TimeoutError as CeleryTimeoutError

from agentloop.orchestration.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
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
    timeout: float = typer.Option(
        30.0, min=0.1, help="Seconds to wait for a worker's answer (then the answer stays queued)."
    ),
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
            _queued(run_id, timeout=timeout, broker=redact_url(str(app.conf.broker_url)), as_json=as_json)
            return
    code = EXIT_USAGE if result.get("not_found") else None if result.get("accepted") else EXIT_FAILED
    if as_json:  # the answer as JSON says it all, a refusal too
        print_json(result)
        if code is not None:
            raise typer.Exit(code)
    elif result.get("accepted"):
        console.print(f"answered; run {run_id} goes on")
    elif result.get("not_found"):
        raise fail(str(result.get("reason")), code=EXIT_USAGE)
    else:
        raise fail(f"refused: {result.get('reason')}", code=EXIT_FAILED)


def _queued(run_id: str, *, timeout: float, broker: str, as_json: bool) -> None:
    """No worker answered in time: the answer is on the broker, checked when a worker takes it."""
    message = (
        f"answer queued: no worker answered within {timeout:g}s on {broker}; "
        "a worker checks it when it takes it"
    )
    if as_json:
        print_json({"run_id": run_id, "accepted": None, "queued": True, "reason": message})
    else:
        console.print(message, markup=False)


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

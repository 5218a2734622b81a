"""``agentloop cancel RUN_ID``: ask every task of a run to stop at its next step.

Through the run store when it knows the run (``DATABASE_URL``, shared with the
workers); otherwise, when a broker is configured, through the workers: the
``agentloop.cancel`` task, answered by a worker from its own store. Exit codes:
0 asked (or the run had already ended: nothing to stop), 1 the workers failed,
2 no such run, 3 no worker answered in time.
"""

from __future__ import annotations

from typing import Any

import typer
from celery.exceptions import TimeoutError as CeleryTimeoutError

from agentloop.orchestration.cli.common import (
    EXIT_FAILED,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    celery_app,
    cli_settings,
    console,
    fail,
    json_option,
    print_json,
    run_store,
)
from agentloop.orchestration.redaction import redact_url
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.settings.broker import Broker
from agentloop.orchestration.wire import CANCEL


def cancel(
    run_id: str = typer.Argument(..., help="The run id (the launch task id)."),
    timeout: float = typer.Option(10.0, min=0.1, help="Seconds to wait for a worker's answer (broker only)."),
    as_json: bool = json_option(),
) -> None:
    """Cancel a run: every task of it stops at its next step (cooperative cancellation)."""
    settings = cli_settings()
    store = run_store(settings)
    record = store.get_run(run_id)
    if record is not None and record.is_finished:
        _report(as_json, run_id, requested=False, via="store", status=record.status)
        return
    if record is not None:
        store.request_cancel(run_id)
        _report(as_json, run_id, requested=True, via="store", status=record.status)
        return
    if Broker.of(settings.broker_url).in_process:
        raise fail(
            f"no run {run_id!r} in the run store ({redact_url(settings.database_url)}), "
            "and no broker to ask the workers (set DATABASE_URL or BROKER_URL)",
            code=EXIT_USAGE,
        )
    _cancel_through_workers(settings, run_id, timeout=timeout)
    _report(as_json, run_id, requested=True, via="broker", status=None)


def _cancel_through_workers(settings: Settings, run_id: str, *, timeout: float) -> None:
    """Send ``agentloop.cancel`` and wait for a worker's answer; exit 1, 2 or 3 when it does not come."""
    with celery_app(settings, start_worker=False) as app:
        try:
            app.send_task(CANCEL, kwargs={"run_id": run_id}).get(timeout=timeout)
        except (TimeoutError, CeleryTimeoutError):
            raise fail(
                f"no worker answered within {timeout:g}s on {redact_url(str(app.conf.broker_url))}",
                code=EXIT_TIMEOUT,
            ) from None
        except Exception as error:
            if type(error).__name__ == "RunNotFoundError":
                raise fail(f"the workers' run store has no run {run_id!r}", code=EXIT_USAGE) from None
            raise fail(f"the workers could not cancel {run_id}: {error}", code=EXIT_FAILED) from None


def _report(as_json: bool, run_id: str, *, requested: bool, via: str, status: str | None) -> None:
    value: dict[str, Any] = {"run_id": run_id, "cancel_requested": requested, "via": via, "status": status}
    if as_json:
        print_json(value)
    elif requested:
        console.print(
            f"cancellation of {run_id} requested (through the {'run store' if via == 'store' else 'workers'})"
        )
    else:
        console.print(f"run {run_id} already ended ({status}): nothing to cancel")

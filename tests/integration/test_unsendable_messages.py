"""A run whose next message would be refused at the workers' edge fails with the reason recorded,
and the message is never sent: a branch input nested too deep or too large, and a stage output
nested too deep (``orchestration/celery_adapter/outgoing.py``), on a real prefork worker."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import CeleryAgentRunner, WorkflowFailedError
from agentloop.orchestration.celery_adapter.edge import MAX_BODY_BYTES, MAX_DEPTH

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("runnable", "says"),
    [
        ("outgoing.deep_branch", f"args are nested deeper than {MAX_DEPTH} levels"),
        ("outgoing.big_branch", f"more than {MAX_BODY_BYTES}"),
        ("outgoing.deep_output", f"nested deeper than {MAX_DEPTH - 3} levels"),
    ],
)
def test_a_run_whose_next_message_the_edge_would_refuse_fails_with_the_reason(
    lone_worker: Any, runnable: str, says: str
) -> None:
    runner = CeleryAgentRunner.create(runnable=runnable, app=lone_worker.app, store=lone_worker.store)
    handle = runner.request_sync(input=None)
    with pytest.raises(WorkflowFailedError) as failed:
        handle.wait_sync(timeout=60)
    assert failed.value.error_type == "UnsendableMessageError"
    record = lone_worker.store.get_run(handle.run_id)
    assert record is not None and record.status == "failed"
    assert record.error is not None and record.error["type"] == "UnsendableMessageError"
    assert "refused at the workers' edge" in record.error["message"]
    assert says in record.error["message"]
    assert ping_answers(lone_worker.app)  # the worker is up, nothing was refused at its edge


def ping_answers(app: Any) -> bool:
    return bool(app.send_task("agentloop.ping").get(timeout=10) == "pong")

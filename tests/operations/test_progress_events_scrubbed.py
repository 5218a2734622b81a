"""A progress event that is not a failure, quoting the node's context secret (a step's message
or data echoing what it was given), is written to the run store without it; a failure's message
is scrubbed of the task's hidden arguments too, and only a failure's."""

from __future__ import annotations

from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.store.seams import ProgressPublisher

SECRET = "sk-context-secret-0123456789abcdef"
HIDDEN_ARGUMENT = "a-hidden-argument-value-0123456789"


def event(status: ProgressStatus, message: str, **data: object) -> ProgressEvent:
    return ProgressEvent(
        run_id="r",
        path="",
        runnable="echo",
        iteration=1,
        max_iterations=3,
        phase="iteration",
        status=status,
        message=message,
        data=data,
    )


def test_a_progress_event_quoting_a_context_secret_is_stored_scrubbed() -> None:
    store = InMemoryRunStore()
    store.create_run(run_id="r", runnable="echo", input=None)
    publisher = ProgressPublisher(
        store=store, run_id="r", secrets=(SECRET,), failure_secrets=lambda: (HIDDEN_ARGUMENT,)
    )

    publisher(event(ProgressStatus.PROGRESS, f"asked with key {SECRET}", echo={"key": SECRET}))
    publisher(event(ProgressStatus.STARTED, f"started ({SECRET})"))
    publisher(event(ProgressStatus.PROGRESS, f"working on {HIDDEN_ARGUMENT}"))
    publisher(event(ProgressStatus.FAILED, f"failed on {HIDDEN_ARGUMENT} with {SECRET}"))
    publisher.flush(final=True)

    stored = [written for _, written in store.events("r")]
    assert len(stored) == 4
    assert SECRET not in str(stored)
    assert stored[0]["message"].startswith("asked with key ") and stored[0]["data"]["echo"]["key"] != SECRET
    assert stored[2]["message"] == f"working on {HIDDEN_ARGUMENT}"  # not a failure: its own words
    assert HIDDEN_ARGUMENT not in stored[3]["message"]

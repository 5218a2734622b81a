"""``agentloop.resume`` between its writes: settling the wait, marking the run running, sending
the paused task again. Whatever stops it after the wait is settled (the store or the broker away
past their retries, a process gone), the same answer again, or ``agentloop.resume_settled``,
finishes the job: the run goes on once, the answer is not changed (issue 21).

The resume runs in this process, on a private Redis as its broker; the paused task's message is
read back from the queue.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from kombu.exceptions import OperationalError

from agentloop.actions.human import Question, QuestionKind
from agentloop.orchestration.celery_adapter import pause
from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.store.waits import ANSWERED, InMemoryWaitStore, Wait
from agentloop.orchestration.wire import PING, RESUME, RESUME_SETTLED
from tests.services.redis_server import RedisServer

PAUSED_TASK_ID = "paused-task"


class FlakyStore(InMemoryRunStore):
    """The memory store whose next ``mark_running`` calls fail as a store away past its retries."""

    failures = 0

    def mark_running(self, run_id: str) -> bool:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailableError("the run store stayed away", seconds=60)
        return super().mark_running(run_id)


@dataclass
class Paused:
    app: Any
    store: FlakyStore
    waits: InMemoryWaitStore
    server: RedisServer
    queue: str
    run_id: str = "r1"

    def resume(self, answer: Any = True, **options: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.app.tasks[RESUME](run_id=self.run_id, answer=answer, **options)
        return result

    def sent(self) -> int:
        """How many messages of the paused task wait in the queue."""
        client = redis.Redis.from_url(self.server.url)
        try:
            bodies = client.lrange(self.queue, 0, -1)
        finally:
            client.close()
        return sum(1 for body in bodies if json.loads(body)["headers"]["id"] == PAUSED_TASK_ID)

    def wait(self) -> Wait:
        [wait] = self.waits.waits(self.run_id)
        return wait


@pytest.fixture
def paused(restartable_redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Paused]:
    """Run ``r1`` waiting for one question, whose paused task is a ping with a known id."""
    monkeypatch.setattr(pause, "RESEND_RETRY", {"max_retries": 1, "interval_start": 0.1})
    store = FlakyStore()
    queue = f"resume-{uuid.uuid4().hex[:8]}"
    app = create_app(
        registry=RunnableRegistry(),
        store=store,
        overrides={
            "broker_url": restartable_redis.url,
            "result_backend": "cache+memory://",
            "task_default_queue": queue,
            "broker_connection_max_retries": 1,
        },
    )
    app.tasks[RESUME]
    waits = pause.dependencies_of(app).waits
    assert isinstance(waits, InMemoryWaitStore)
    store.create_run(run_id="r1", runnable="x", input=None)
    store.mark_running("r1")
    message = json.loads(json.dumps(dict(app.signature(PING, options={"task_id": PAUSED_TASK_ID}))))
    assert waits.record(
        Wait(
            run_id="r1",
            path="branch/b",
            question=Question(prompt="ok?", kind=QuestionKind.APPROVAL),
            message=message,
        )
    )
    assert waits.mark_run_waiting("r1")
    try:
        yield Paused(app=app, store=store, waits=waits, server=restartable_redis, queue=queue)
    finally:
        app.close()


def test_the_same_answer_again_sends_the_run_on_after_the_store_stayed_away(paused: Paused) -> None:
    paused.store.failures = 1
    with pytest.raises(StoreUnavailableError):
        paused.resume(True)  # the wait is settled; marking the run running failed
    assert (paused.wait().status, paused.wait().resumed, paused.sent()) == (ANSWERED, False, 0)
    assert paused.resume(True)["accepted"] is True  # Celery's retry of that resume
    assert (paused.store.get_run("r1").status, paused.sent(), paused.wait().resumed) == ("running", 1, True)
    again = paused.resume(True)  # once resumed, refused, and never sent twice
    assert again["accepted"] is False and paused.sent() == 1
    assert paused.wait().answer is True


def test_the_same_answer_again_sends_the_run_on_after_the_broker_was_away(paused: Paused) -> None:
    paused.server.stop()
    with pytest.raises(OperationalError):
        paused.resume(True)
    assert (paused.wait().status, paused.wait().resumed) == (ANSWERED, False)
    paused.server.start()
    assert paused.resume(True)["accepted"] is True
    assert (paused.sent(), paused.wait().resumed) == (1, True)


def test_another_answer_is_refused_and_the_settled_one_still_goes_on(paused: Paused) -> None:
    paused.store.failures = 1
    with pytest.raises(StoreUnavailableError):
        paused.resume(True)
    refused = paused.resume(False)
    assert refused["accepted"] is False and refused["reason"] == "the question was answered already"
    assert (paused.sent(), paused.wait().answer, paused.store.get_run("r1").status) == (1, True, "running")


def test_resume_settled_sends_on_what_no_resume_came_back_for(paused: Paused) -> None:
    paused.store.failures = 1
    with pytest.raises(StoreUnavailableError):
        paused.resume(True)
    assert paused.app.tasks[RESUME_SETTLED](older_than=3600) == {
        "resumed": 0
    }  # too recent: a resume may be going on
    assert paused.sent() == 0
    assert paused.app.tasks[RESUME_SETTLED](older_than=0) == {"resumed": 1}
    assert (paused.sent(), paused.wait().resumed, paused.store.get_run("r1").status) == (1, True, "running")
    assert paused.app.tasks[RESUME_SETTLED](older_than=0) == {"resumed": 0}


def test_a_resume_for_a_run_that_ended_meanwhile_sends_nothing(paused: Paused) -> None:
    paused.store.failures = 1
    with pytest.raises(StoreUnavailableError):
        paused.resume(True)
    paused.store.finish_run("r1", status="cancelled")
    assert paused.resume(True)["accepted"] is True
    assert (paused.sent(), paused.wait().resumed, paused.store.get_run("r1").status) == (0, True, "cancelled")

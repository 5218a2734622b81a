"""Parked waiters on a Celery worker (the embedded defaults: ``memory://`` broker, worker threads, a
SQLite run store): a run past its key's limit is parked and sent again by the end of a run of its
key, not by polling; a wake lost between the store and the broker is made good by the parked
run's backstop copy; and no run's step runs twice, however many copies of its message came.
Everything is counted (runs inside the step, copies sent), never timed; every wait is bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop.loops import ProceduralAgentLoop
from agentloop.orchestration.celery_adapter import admission
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.fairness import shares
from agentloop.orchestration.fairness.rules import Concurrency
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import open_store
from agentloop.pipelines import BaseAgentPipeline
from tests.services.worker_environment import embedded_app

CEILING = 60.0


class Gate:
    """Runs inside their step now, the most at once, every entry, and the test's release."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.inside = self.most = 0
        self.entries: list[str] = []
        self.release = threading.Event()

    def until(self, what: str, check: Any) -> None:
        with self.lock:
            if not self.lock.wait_for(lambda: check(self), timeout=CEILING):
                raise AssertionError(f"never saw {what}: {self.inside} inside, entries {self.entries}")


GATE = Gate()


class Gated(ProceduralAgentLoop):
    """Input ``{"n": i}``: enters the gate, waits for the test's release, leaves."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"n": input["n"], "done": False}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        with GATE.lock:
            GATE.inside += 1
            GATE.most = max(GATE.most, GATE.inside)
            GATE.entries.append(str(state["n"]))
            GATE.lock.notify_all()
        try:
            if not GATE.release.wait(timeout=CEILING):
                raise TimeoutError("the test never released the step")
        finally:
            with GATE.lock:
                GATE.inside -= 1
                GATE.lock.notify_all()
        return {**state, "done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


class Plain(ProceduralAgentLoop):
    """The second stage of :class:`TwoStages`: answers its input."""

    max_iterations = 1

    def create_initial_state(self, *, input: Any) -> Any:
        return {"n": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return state

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return iteration > 0

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


class TwoStages(BaseAgentPipeline):
    """A run of several tasks: it ends in ``agentloop.finalize``, not in its launch."""

    stages = [Gated, Plain]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[dict[str, Any]]:
    global GATE
    GATE = Gate()
    registry = RunnableRegistry()
    registry.register("wake.gated", Gated, concurrency=Concurrency(limit=2))
    registry.register("wake.stages", TwoStages, concurrency=Concurrency(limit=1))
    store, _ = open_store(f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    try:
        with embedded_app(registry, store, name="wake", concurrency=6) as (app, _):
            try:
                yield {"app": app, "store": store}
            finally:
                GATE.release.set()
    finally:
        store.engine.dispose()


def launch(rig: dict[str, Any], count: int) -> list[Any]:
    runner = CeleryAgentRunner.create(runnable="wake.gated", app=rig["app"], store=rig["store"])
    return [runner.request_sync(input={"n": n}, concurrency_key="tenant") for n in range(count)]


def waiting(rig: dict[str, Any], count: int) -> None:
    deadline = time.monotonic() + CEILING
    while rig["store"].concurrency.counts().get("tenant") is None or (
        rig["store"].concurrency.counts()["tenant"].waiting != count
    ):
        assert time.monotonic() < deadline, rig["store"].concurrency.counts()
        time.sleep(0.02)


def test_a_parked_run_is_sent_again_by_the_end_of_its_keys_run(
    rig: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # no backstop within the test's ceiling: only a wake can start a parked run
    monkeypatch.setattr(shares, "FIRST_BACKSTOP", 3600.0)
    handles = launch(rig, 5)
    GATE.until("two runs inside", lambda gate: gate.inside == 2)
    waiting(rig, 3)
    GATE.release.set()
    assert sorted(handle.wait_sync(timeout=CEILING) for handle in handles) == [0, 1, 2, 3, 4]
    assert GATE.most == 2 and sorted(GATE.entries) == ["0", "1", "2", "3", "4"]  # each step once
    # each parked run asked once and was sent once: no polling
    assert rig["store"].concurrency.counts()["tenant"].waits == 3


def test_a_wake_lost_between_the_store_and_the_broker_is_made_good_by_the_backstop(
    rig: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process that freed a slot marks the next waiter woken, then its broker connection is
    gone before the wake is sent (as if it died there): the waiter's backstop copy starts it."""
    monkeypatch.setattr(shares, "FIRST_BACKSTOP", 0.2)
    monkeypatch.setattr(shares, "BACKSTOP_PER_ROUND", 0.2)
    sent, lost = admission.send_copy, []

    def connection_closed_at_the_wake(app: Any, message: Any, countdown: float | None = None) -> str:
        if countdown is None:  # a wake, not a backstop
            lost.append(message["task_id"])
            raise ConnectionResetError("the broker connection closed")
        return sent(app, message, countdown)

    monkeypatch.setattr(admission, "send_copy", connection_closed_at_the_wake)
    handles = launch(rig, 5)
    GATE.until("two runs inside", lambda gate: gate.inside == 2)
    waiting(rig, 3)
    GATE.release.set()
    assert sorted(handle.wait_sync(timeout=CEILING) for handle in handles) == [0, 1, 2, 3, 4]
    assert lost  # wakes were lost, and every run still ran
    assert GATE.most == 2 and sorted(GATE.entries) == ["0", "1", "2", "3", "4"]  # each step once
    statuses = [rig["store"].get_run(handle.run_id).status for handle in handles]
    assert statuses == ["succeeded"] * 5


def test_a_keyed_batch_parks_its_runs_in_the_store_and_sends_only_those_that_may_start(
    rig: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of 8 under a limit of 2: the chunk parks all 8 in the key's line and sends 2
    launches; the other 6 are in line without having asked (no message of theirs was sent), and
    are sent as the first runs end."""
    from agentloop.orchestration.celery_adapter.batches import summarize
    from agentloop.orchestration.wire import BATCH

    monkeypatch.setattr(shares, "FIRST_BACKSTOP", 3600.0)
    kwargs = {
        "runnable": "wake.gated",
        "inputs": [{"n": n} for n in range(8)],
        "concurrency_key": "tenant",
        "poll_seconds": 0.2,
    }
    batch_id = rig["app"].send_task(BATCH, kwargs=kwargs).get(timeout=CEILING)["batch_id"]
    GATE.until("two runs inside", lambda gate: gate.inside == 2)
    waiting(rig, 6)
    assert rig["store"].concurrency.counts()["tenant"].waits == 0  # none asked: parked by the chunk
    GATE.release.set()
    deadline = time.monotonic() + CEILING
    while summarize(rig["store"], batch_id)["succeeded"] != 8:
        assert time.monotonic() < deadline, summarize(rig["store"], batch_id)
        time.sleep(0.05)
    assert GATE.most == 2 and sorted(GATE.entries) == [str(n) for n in range(8)]  # each step once


def test_a_run_of_several_tasks_wakes_its_keys_parked_runs_from_its_finalize(
    rig: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shares, "FIRST_BACKSTOP", 3600.0)  # only a wake can start the parked runs
    runner = CeleryAgentRunner.create(runnable="wake.stages", app=rig["app"], store=rig["store"])
    handles = [runner.request_sync(input={"n": n}, concurrency_key="tenant") for n in range(3)]
    GATE.until("one run inside", lambda gate: gate.inside == 1)
    waiting(rig, 2)
    GATE.release.set()
    assert sorted(handle.wait_sync(timeout=CEILING) for handle in handles) == [0, 1, 2]
    assert GATE.most == 1 and sorted(GATE.entries) == ["0", "1", "2"]

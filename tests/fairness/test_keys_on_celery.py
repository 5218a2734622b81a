"""Concurrency keys on a Celery worker (the embedded defaults: ``memory://`` broker, worker threads,
a SQLite run store): a key past its limit waits without holding a worker slot, another key's run
starts meanwhile, refusals fail the run with the reason, the oldest run is cancelled to make room.
Everything is counted (runs inside the step at once), never timed; every wait is bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop.loops import ProceduralAgentLoop
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.errors import LaunchRequestError
from agentloop.orchestration.fairness.rules import Concurrency
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import open_store
from agentloop.orchestration.wire import LAUNCH
from tests.services.worker_environment import embedded_app

CEILING = 60.0


class Gauge:
    """How many runs of each key are inside their step now, and the most there ever were."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.inside: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.release = threading.Event()

    def enter(self, key: str) -> None:
        with self.lock:
            self.inside[key] = self.inside.get(key, 0) + 1
            self.most[key] = max(self.most.get(key, 0), self.inside[key])
            self.lock.notify_all()

    def leave(self, key: str) -> None:
        with self.lock:
            self.inside[key] -= 1
            self.lock.notify_all()

    def until(self, what: str, check: Any) -> None:
        with self.lock:
            if not self.lock.wait_for(lambda: check(self), timeout=CEILING):
                raise AssertionError(f"never saw {what}: inside {self.inside}")


GAUGE = Gauge()


def polled(read: Any, check: Any) -> Any:
    """``read()`` once ``check`` holds of it (bounded: :data:`CEILING`)."""
    deadline = time.monotonic() + CEILING
    while not check(value := read()):
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw it: {value}")
        time.sleep(0.02)
    return value


class Held(ProceduralAgentLoop):
    """Input ``{"key": k}``: enters the gauge, waits for the test's release, leaves."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"key": input["key"], "done": False}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        GAUGE.enter(state["key"])
        try:
            if not GAUGE.release.wait(timeout=CEILING):
                raise TimeoutError("the test never released the step")
        finally:
            GAUGE.leave(state["key"])
        return {**state, "done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return state["key"]


def tenant_of(input: Any, context: Any) -> str | None:
    return context.get("tenant")


class Refusing(Held):
    pass


class Evicting(Held):
    """Two steps: a cancel asked during the first is seen before the second (cancels are cooperative)."""

    max_iterations = 3

    def create_initial_state(self, *, input: Any) -> Any:
        return {"key": input["key"], "done": False, "steps": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        advanced = super().advance_state(state=state, iteration=iteration)
        return {**advanced, "steps": state["steps"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["steps"] >= 2)


@pytest.fixture
def keys_rig(tmp_path: Path) -> Iterator[dict[str, Any]]:
    global GAUGE
    GAUGE = Gauge()
    registry = RunnableRegistry()
    registry.register("keys.held", Held, concurrency=Concurrency(limit=2, key=tenant_of))
    registry.register("keys.refusing", Refusing, concurrency=Concurrency(limit=1, on_limit="refuse"))
    registry.register("keys.evicting", Evicting, concurrency=Concurrency(limit=1, on_limit="cancel_oldest"))
    store, _ = open_store(f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    try:
        with embedded_app(registry, store, name="keys", concurrency=6) as (app, _):
            try:
                yield {"app": app, "store": store}
            finally:
                GAUGE.release.set()  # before the worker stops: it waits for its tasks
    finally:
        store.engine.dispose()


def runner(keys_rig: dict[str, Any], name: str, context: dict[str, Any] | None = None) -> CeleryAgentRunner:
    return CeleryAgentRunner.create(
        runnable=name, app=keys_rig["app"], store=keys_rig["store"], context=context
    )


def test_a_key_past_its_limit_waits_without_a_worker_slot_and_other_keys_go_on(
    keys_rig: dict[str, Any],
) -> None:
    a = [runner(keys_rig, "keys.held", {"tenant": "A"}).request_sync(input={"key": "A"}) for _ in range(5)]
    GAUGE.until("two runs of A inside", lambda g: g.inside.get("A") == 2)
    # three of A wait: their launches went back to the queue, so the six worker threads are free
    # for B's run, which the rule keys by its context too
    b = runner(keys_rig, "keys.held", {"tenant": "B"}).request_sync(input={"key": "B"})
    GAUGE.until("B's run inside beside A's two", lambda g: g.inside.get("B") == 1)
    counts = polled(lambda: keys_rig["store"].concurrency.counts(), lambda c: c["A"].waiting == 3)
    assert (counts["A"].held, counts["A"].waiting, counts["B"].held) == (2, 3, 1)
    statuses = sorted(keys_rig["store"].get_run(handle.run_id).status for handle in a)
    assert statuses == ["pending"] * 3 + ["running"] * 2  # the waiting ones have not started

    GAUGE.release.set()
    assert [handle.wait_sync(timeout=CEILING) for handle in a] == ["A"] * 5
    assert b.wait_sync(timeout=CEILING) == "B"
    assert GAUGE.most == {"A": 2, "B": 1}  # never more than the limit inside at once
    assert keys_rig["store"].concurrency.counts()["A"].waits >= 3


def test_the_launch_keyword_sets_the_key_and_every_task_carries_it(keys_rig: dict[str, Any]) -> None:
    handles = [
        runner(keys_rig, "keys.held").request_sync(input={"key": "T"}, concurrency_key="tenant-7")
        for _ in range(3)
    ]
    GAUGE.until("two runs of tenant-7 inside", lambda g: g.inside.get("T") == 2)
    polled(lambda: keys_rig["store"].concurrency.counts(), lambda c: c["tenant-7"].waiting == 1)
    GAUGE.release.set()
    assert [handle.wait_sync(timeout=CEILING) for handle in handles] == ["T"] * 3
    assert keys_rig["store"].concurrency.keys_of([h.run_id for h in handles]) == dict.fromkeys(
        (h.run_id for h in handles), "tenant-7"
    )


def test_a_refusing_runnable_fails_the_run_past_its_limit_with_the_reason(keys_rig: dict[str, Any]) -> None:
    first = runner(keys_rig, "keys.refusing").request_sync(input={"key": "R"}, concurrency_key="R")
    GAUGE.until("the first run inside", lambda g: g.inside.get("R") == 1)
    second = runner(keys_rig, "keys.refusing").request_sync(input={"key": "R"}, concurrency_key="R")
    with pytest.raises(Exception, match=r"ConcurrencyLimitError|has 1 runs in flight"):
        second.wait_sync(timeout=CEILING)
    record = keys_rig["store"].get_run(second.run_id)
    assert record.status == "failed" and record.error["type"] == "ConcurrencyLimitError"
    assert "limit is 1" in record.error["message"]
    GAUGE.release.set()
    assert first.wait_sync(timeout=CEILING) == "R"


def test_cancel_oldest_cancels_the_oldest_run_and_starts_the_new_one(keys_rig: dict[str, Any]) -> None:
    old = runner(keys_rig, "keys.evicting").request_sync(input={"key": "E"}, concurrency_key="E")
    GAUGE.until("the old run inside", lambda g: g.inside.get("E") == 1)
    new = runner(keys_rig, "keys.evicting").request_sync(input={"key": "E"}, concurrency_key="E")
    GAUGE.until("the new run inside beside the cancelled one", lambda g: g.most.get("E") == 2)
    assert keys_rig["store"].get_run(old.run_id).cancel_requested
    assert keys_rig["store"].concurrency.counts()["E"].evicted == 1
    time.sleep(0.6)  # not a verdict: a process reads the cancel flag at most every 0.5 s (store/seams.py)
    GAUGE.release.set()
    assert new.wait_sync(timeout=CEILING) == "E"
    with pytest.raises(Exception):  # noqa: B017 - the old run ends cancelled, whatever its error's class
        old.wait_sync(timeout=CEILING)
    assert keys_rig["store"].get_run(old.run_id).status == "cancelled"


def test_a_bad_key_or_priority_is_a_clear_refusal(keys_rig: dict[str, Any]) -> None:
    with pytest.raises(LaunchRequestError, match="priority must be an integer from 0 to 9"):
        runner(keys_rig, "keys.held").request_sync(input={"key": "x"}, priority=12)
    sent = keys_rig["app"].send_task(
        LAUNCH, kwargs={"runnable": "keys.held", "input": {"key": "x"}, "concurrency_key": ""}
    )
    with pytest.raises(Exception, match="concurrency_key must be a non-empty string"):
        sent.get(timeout=CEILING)


def test_a_batch_under_a_key_launches_every_run_under_it(keys_rig: dict[str, Any]) -> None:
    from agentloop.orchestration.celery_adapter.batches import summarize
    from agentloop.orchestration.wire import BATCH

    GAUGE.release.set()
    kwargs = {
        "runnable": "keys.held",
        "inputs": [{"key": "K"}] * 3,
        "concurrency_key": "tenant-b",
        "poll_seconds": 0.2,
    }
    batch_id = keys_rig["app"].send_task(BATCH, kwargs=kwargs).get(timeout=CEILING)["batch_id"]
    polled(lambda: summarize(keys_rig["store"], batch_id), lambda state: state["succeeded"] == 3)
    children = [f"{batch_id}-{index}" for index in range(3)]
    assert keys_rig["store"].concurrency.keys_of(children) == dict.fromkeys(children, "tenant-b")

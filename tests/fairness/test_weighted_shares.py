"""Weighted fair shares on a Celery worker (``memory://`` broker, worker threads, a SQLite run
store, ``AGENTLOOP_FAIR_SLOTS=3``): keys C (weight 2) and D (weight 1) with equal backlogs hold 2
and 1 of the 3 slots at every step while both wait, so they are admitted 2:1. The test lets one
run end at a time and counts the runs inside their step by key, and the slots the store says
are held; nothing is timed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop.loops import ProceduralAgentLoop
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.fairness import shares
from agentloop.orchestration.fairness.rules import Concurrency
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.store import open_store
from tests.services.worker_environment import embedded_app

CEILING = 60.0


class Turnstile:
    """Runs inside their step by key; each leaves only when the test lets one through."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.inside: dict[str, int] = {}
        self.left = 0
        self.passes = threading.Semaphore(0)

    def until(self, what: str, check: Any) -> dict[str, int]:
        with self.lock:
            if not self.lock.wait_for(lambda: check(self.inside), timeout=CEILING):
                raise AssertionError(f"never saw {what}: inside {self.inside}")
            return dict(self.inside)


TURNSTILE = Turnstile()


class Turn(ProceduralAgentLoop):
    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"key": input["key"], "done": False}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        key = state["key"]
        with TURNSTILE.lock:
            TURNSTILE.inside[key] = TURNSTILE.inside.get(key, 0) + 1
            TURNSTILE.lock.notify_all()
        try:
            if not TURNSTILE.passes.acquire(timeout=CEILING):
                raise TimeoutError("the test never let this run through")
        finally:
            with TURNSTILE.lock:
                TURNSTILE.inside[key] -= 1
                TURNSTILE.left += 1
                TURNSTILE.lock.notify_all()
        return {**state, "done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return state["key"]


def plan(key: str) -> int:
    return 2 if key == "C" else 1


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    global TURNSTILE
    TURNSTILE = Turnstile()
    monkeypatch.setattr(shares, "FIRST_BACKSTOP", 3600.0)  # only wakes start parked runs
    registry = RunnableRegistry()
    registry.register("weighted.turn", Turn, concurrency=Concurrency(key=lambda i, c: i["key"], weight=plan))
    store, _ = open_store(f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    settings = load_settings({"AGENTLOOP_FAIR_SLOTS": "3"})
    try:
        with embedded_app(registry, store, name="weighted", concurrency=8, settings=settings) as (app, _):
            try:
                yield {"app": app, "store": store}
            finally:
                TURNSTILE.passes.release(100)
    finally:
        store.engine.dispose()


def test_keys_of_weights_2_and_1_hold_2_and_1_slots_while_both_wait(rig: dict[str, Any]) -> None:
    """One run of each key goes first, and the rest are sent once both hold their slots: every
    later run arrives while both keys have work, so none is admitted past its share (a key alone
    takes all 3 slots, and a run in flight is never stopped). The split is 2:1 at once, and stays
    2:1 after every run that ends while both keys wait."""
    store = rig["store"]
    runner = CeleryAgentRunner.create(runnable="weighted.turn", app=rig["app"], store=store)
    handles = [runner.request_sync(input={"key": "C"}), runner.request_sync(input={"key": "D"})]
    held_by_key(store, "the first run of each key holding its slot", {"C": 1, "D": 1})
    for _ in range(11):  # equal backlogs, arriving in turns
        handles += [runner.request_sync(input={"key": "C"}), runner.request_sync(input={"key": "D"})]
    deadline = time.monotonic() + CEILING
    while sum(c.held + c.waiting for c in store.concurrency.counts().values()) < 24:  # all asked
        assert time.monotonic() < deadline, store.concurrency.counts()
        time.sleep(0.02)
    splits = [TURNSTILE.until("C's second run inside", lambda inside: inside == {"C": 2, "D": 1})]
    held_by_key(store, "no run admitted but those inside", {"C": 2, "D": 1})

    def next_split() -> dict[str, int]:
        left = TURNSTILE.left
        TURNSTILE.passes.release()  # one run ends; the store wakes whom the shares allow
        TURNSTILE.until("the run leaving", lambda inside: TURNSTILE.left == left + 1)
        return TURNSTILE.until("3 runs inside", lambda inside: sum(inside.values()) == 3)

    for _ in range(5):
        counts = store.concurrency.counts()
        assert counts["C"].waiting > 0 and counts["D"].waiting > 0  # both keys still have a backlog
        splits.append(next_split())
    assert splits == [{"C": 2, "D": 1}] * 6
    TURNSTILE.passes.release(100)
    assert sorted(handle.wait_sync(timeout=CEILING) for handle in handles) == ["C"] * 12 + ["D"] * 12


def held_by_key(store: Any, what: str, expected: dict[str, int]) -> None:
    """Until the store's held slots by key are ``expected`` (bounded; no run ends meanwhile)."""
    deadline = time.monotonic() + CEILING
    while (held := {key: c.held for key, c in store.concurrency.counts().items() if c.held}) != expected:
        assert time.monotonic() < deadline, f"never saw {what}: held {held}"
        time.sleep(0.02)

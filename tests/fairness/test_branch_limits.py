"""A key's branch limit on a Celery worker (the embedded defaults: ``memory://`` broker, worker
threads, a SQLite run store): a keyed composite's branches past ``Concurrency.branch_limit`` are
parked and woken, never more in flight than the limit across the key's runs, every branch runs
once and all complete; a run without a key is not limited. Counted, never timed; every wait is
bounded."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from agentloop import BaseCompositeAgent, Branch
from agentloop.loops import ProceduralAgentLoop
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.fairness.rules import Concurrency
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import open_store
from agentloop.orchestration.store.tables import concurrency_slots
from tests.services.worker_environment import embedded_app

CEILING = 60.0
WIDTH = 8


class Gauge:
    """Branches inside their step now, the most at once, each branch's entries, the release."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.inside = 0
        self.most = 0
        self.entries: dict[str, int] = {}
        self.release = threading.Event()
        self.failing: str | None = None

    def fails(self, name: str) -> bool:
        """Whether ``name`` is the branch that fails its run: the first of a ``failing/`` run's
        branches to take a slot (whichever of them the key's slots let in first), every time."""
        with self.lock:
            if self.failing is None and name.startswith("failing/"):
                self.failing = name
            return name == self.failing

    def enter(self, name: str) -> None:
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self.entries[name] = self.entries.get(name, 0) + 1
            self.lock.notify_all()

    def leave(self) -> None:
        with self.lock:
            self.inside -= 1
            self.lock.notify_all()

    def until(self, what: str, check: Any) -> None:
        with self.lock:
            if not self.lock.wait_for(lambda: check(self), timeout=CEILING):
                raise AssertionError(f"never saw {what}: inside {self.inside}, entries {self.entries}")


GAUGE = Gauge()


class Step(ProceduralAgentLoop):
    """Input ``"run/branch"``: enters the gauge, waits for the test's release, leaves (the first
    branch of a ``failing`` run to start raises instead)."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"name": input, "done": False}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        if GAUGE.fails(state["name"]):
            raise RuntimeError("this branch fails its run")
        GAUGE.enter(state["name"])
        try:
            if not GAUGE.release.wait(timeout=CEILING):
                raise TimeoutError("the test never released the step")
        finally:
            GAUGE.leave()
        return {**state, "done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return state["name"]


class Fan(BaseCompositeAgent):
    """``WIDTH`` branches of :class:`Step`, one task each (a pack would hold one worker thread)."""

    branch_runnables = (Step,)
    pack_size = 1

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Step, input=f"{input}/{n}", key=str(n)) for n in range(WIDTH)]


class AsyncStep(Step):
    """:class:`Step` whose step is a coroutine: its branches may be packed."""

    async def advance_state(self, *, state: Any, iteration: int) -> Any:  # type: ignore[override]
        return await asyncio.to_thread(Step.advance_state, self, state=state, iteration=iteration)


class PackedFan(BaseCompositeAgent):
    """``WIDTH`` packable branches, four to a pack (the branch limit makes it two)."""

    branch_runnables = (AsyncStep,)
    pack_size = 4

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=AsyncStep, input=f"{input}/{n}", key=str(n)) for n in range(WIDTH)]


def tenant_of(input: Any, context: Any) -> str | None:
    return context.get("tenant")


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[dict[str, Any]]:
    global GAUGE
    GAUGE = Gauge()
    registry = RunnableRegistry()
    registry.register("branches.fan", Fan, concurrency=Concurrency(branch_limit=2, key=tenant_of))
    registry.register("branches.failing", Fan, concurrency=Concurrency(branch_limit=2, key=tenant_of))
    registry.register("branches.packed", PackedFan, concurrency=Concurrency(branch_limit=2))
    store, _ = open_store(f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    try:
        with embedded_app(registry, store, name="branches", concurrency=8) as (app, _):
            try:
                yield {"app": app, "store": store}
            finally:
                GAUGE.release.set()  # before the worker stops: it waits for its tasks
    finally:
        store.engine.dispose()


def parked(rig: dict[str, Any], key: str) -> int:
    """The branch tasks of ``key`` waiting in the store."""
    slots = concurrency_slots.c
    query = select(func.count()).where(slots.kind == "branch", slots.key == key, slots.state == "waiting")
    with rig["store"].engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def settled(rig: dict[str, Any], key: str, waiting: int) -> None:
    """Until ``waiting`` branch tasks of ``key`` are parked, or more than two are inside (the
    limit broken: the caller's assertion says so)."""
    deadline = time.monotonic() + CEILING
    while parked(rig, key) != waiting and GAUGE.inside <= 2:
        assert time.monotonic() < deadline, f"never saw {waiting} parked: {parked(rig, key)}"
        time.sleep(0.02)


def launched(rig: dict[str, Any], runnable: str, name: str, tenant: str | None = None, **kwargs: Any) -> Any:
    context = {"tenant": tenant} if tenant is not None else None
    runner = CeleryAgentRunner.create(runnable=runnable, app=rig["app"], store=rig["store"], context=context)
    return runner.request_sync(input=name, **kwargs)


def test_a_keyed_composite_has_at_most_its_branch_limit_in_flight_and_every_branch_runs_once(
    rig: dict[str, Any],
) -> None:
    handle = launched(rig, "branches.fan", "one", tenant="A")
    GAUGE.until("two branches inside", lambda g: g.inside == 2)
    settled(rig, "A", WIDTH - 2)  # the six others are parked: their tasks ended, eight threads free
    assert GAUGE.inside == 2
    GAUGE.release.set()
    result = handle.wait_sync(timeout=CEILING)
    assert repr(result).count("one/") == WIDTH, result  # all eight branches' outputs merged
    assert GAUGE.most == 2
    assert GAUGE.entries == {f"one/{n}": 1 for n in range(WIDTH)}  # each step ran once


def test_two_runs_of_one_key_share_its_branch_limit(rig: dict[str, Any]) -> None:
    first = launched(rig, "branches.fan", "first", tenant="A")
    second = launched(rig, "branches.fan", "second", tenant="A")
    GAUGE.until("two branches inside", lambda g: g.inside == 2)
    settled(rig, "A", 2 * WIDTH - 2)
    assert GAUGE.inside == 2
    GAUGE.release.set()
    first.wait_sync(timeout=CEILING)
    second.wait_sync(timeout=CEILING)
    assert GAUGE.most == 2
    assert GAUGE.entries == {f"{run}/{n}": 1 for run in ("first", "second") for n in range(WIDTH)}


def test_a_run_without_a_key_is_not_limited(rig: dict[str, Any]) -> None:
    handle = launched(rig, "branches.fan", "free")
    GAUGE.until("more branches inside than the limit", lambda g: g.inside >= 3)
    GAUGE.release.set()
    handle.wait_sync(timeout=CEILING)
    assert GAUGE.entries == {f"free/{n}": 1 for n in range(WIDTH)}


def test_a_pack_takes_its_branches_slots_at_once_and_is_cut_to_the_branch_limit(rig: dict[str, Any]) -> None:
    handle = launched(rig, "branches.packed", "packed", concurrency_key="B")
    GAUGE.until("two branches inside", lambda g: g.inside == 2)
    settled(rig, "B", 3)  # four packs of two (not two of four, which no slot count could hold)
    assert GAUGE.inside == 2
    GAUGE.release.set()
    handle.wait_sync(timeout=CEILING)
    assert GAUGE.most == 2
    assert GAUGE.entries == {f"packed/{n}": 1 for n in range(WIDTH)}


def test_the_parked_branches_of_a_run_that_ended_hold_up_none_of_its_keys_other_runs(
    rig: dict[str, Any],
) -> None:
    failing = launched(rig, "branches.failing", "failing", tenant="A")
    deadline = time.monotonic() + CEILING
    while (record := rig["store"].get_run(failing.run_id)) is None or record.status != "failed":
        assert time.monotonic() < deadline, "the failing run never failed"
        time.sleep(0.02)
    GAUGE.release.set()
    # the failed run's parked branches, woken, run nothing and give their places up (those its run
    # gate turns away: tasks.admitted) or end at once: the next run of the key is not held up
    # behind them until their leases end (two minutes and more)
    later = launched(rig, "branches.fan", "later", tenant="A")
    later.wait_sync(timeout=CEILING)
    assert GAUGE.most <= 2
    assert {name: count for name, count in GAUGE.entries.items() if name.startswith("later/")} == {
        f"later/{n}": 1 for n in range(WIDTH)
    }

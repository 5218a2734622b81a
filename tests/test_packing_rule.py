"""The packing rule (``orchestration/packing/rule.py``, ``celery_adapter/pack_policy.py``) and
the lag watch (``orchestration/packing/lag.py``), without a broker: what is packed when nothing
is set, what a set size overrides, and a branch that blocks its pack's loop named in the log, its
events and the metrics."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
from test_canvas_shapes import FakeTask

from agentloop import BaseAgentLoop, BaseAgentPipeline, InlineAgentRunner, step
from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.pack_policy import pack_plan, pool_name
from agentloop.orchestration.metrics import record as metrics
from agentloop.orchestration.metrics.instruments import RunInstruments
from agentloop.orchestration.packing.rule import (
    AUTO_PACK_SIZE_MAX,
    AUTO_PACKS,
    auto_pack_size,
    deployment_packing,
    plain_work,
    why_not_packed,
)
from agentloop.orchestration.packing.threads import current_pack_threads
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import LOOP_BLOCKED, WorkflowEngine
from agentloop.orchestration.runtime.next_step import FanOut
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import WorkflowNode


class Awaits(BaseAgentLoop):
    max_iterations = 3

    def create_initial_state(self, *, input: Any) -> Any:
        return {"n": 0, "block": input}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await asyncio.sleep(0.01)
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        if state["block"] and state["n"] == 1:
            time.sleep(0.8)  # a plain hook that blocks the pack's event loop
        return bool(state["n"] >= 2)

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


class Plain(Awaits):
    def advance_state(self, *, state: Any, iteration: int) -> Any:  # type: ignore[override]
        return {**state, "n": state["n"] + 1}


@step
async def awaited_step(value: Any) -> Any:
    return value


@step
def plain_step(value: Any) -> Any:
    return value


class Stages(BaseAgentPipeline):
    stages = (awaited_step,)


def test_the_rule_packs_every_loop_and_step_and_names_the_work_a_packs_threads_run() -> None:
    assert [why_not_packed(runnable) for runnable in (Awaits, awaited_step, Plain, plain_step)] == [None] * 4
    assert "expands" in str(why_not_packed(Stages))
    assert [plain_work(runnable) for runnable in (Awaits, awaited_step, Stages)] == [None] * 3
    assert plain_work(Plain) == "Plain.advance_state" and plain_work(plain_step) == "the step plain_step"


@pytest.mark.parametrize(
    ("pool", "version", "limits", "allowed"),
    [
        ("prefork", 2, False, True),
        ("threads", 2, False, True),
        ("solo", 2, True, True),  # threads and solo enforce no time limit
        ("threads", 2, True, True),
        ("prefork", 2, True, False),  # a limit the user set would cover the whole pack
        (None, 2, True, False),
        ("gevent", 2, False, False),
        ("eventlet", 2, False, False),
        ("prefork", 1, False, False),  # a worker that says it cannot run packs
    ],
)
def test_the_deployment_side_of_the_rule(pool: str | None, version: int, limits: bool, allowed: bool) -> None:
    decision = deployment_packing(pool=pool, wire_version=version, time_limits_set=limits)
    assert decision.allowed is allowed and (decision.reason == "") is allowed


def test_packs_are_at_most_200_as_even_as_the_width_allows_and_never_above_the_bound() -> None:
    assert [auto_pack_size(width, None) for width in (2, 200, 201, 1000, 1001, 4000)] == [
        2,
        200,
        101,
        200,
        167,
        200,
    ]
    assert auto_pack_size(100, 8) == 8 and auto_pack_size(10, 8) == 8 and auto_pack_size(3, 8) == 3
    assert auto_pack_size(1000, 500) == 200
    assert auto_pack_size(10_000, 500) == 200  # a bound keeps its lanes of 200, however wide


@pytest.mark.parametrize(
    ("width", "packs", "size"),
    [
        (4001, 20, 201),  # just past 20 packs of 200: 20 bigger ones
        (10_000, 20, 500),
        (20_000, 20, 1000),
        (20_001, 21, 953),  # past 20 packs of 1,000: packs of at most 1,000
        (100_000, 100, 1000),
    ],
)
def test_a_fan_out_wider_than_20_packs_gets_20_bigger_ones_of_at_most_1000(
    width: int, packs: int, size: int
) -> None:
    assert auto_pack_size(width, None) == size
    assert -(-width // size) == packs
    assert AUTO_PACKS == 20 and AUTO_PACK_SIZE_MAX == 1000 and size <= AUTO_PACK_SIZE_MAX


def test_pool_names_are_read_from_celerys_classes() -> None:
    from celery.concurrency import get_implementation

    assert [pool_name(get_implementation(name)) for name in ("prefork", "threads", "solo")] == [
        "prefork",
        "threads",
        "solo",
    ]
    assert pool_name(object) is None


NODE = WorkflowNode(run_id="r", runnable="fan")


def fan(width: int, **fields: Any) -> FanOut:
    branches = [(WorkflowEngine.branch_node(NODE, "leaf", str(i), width, True), i) for i in range(width)]
    return FanOut(node=NODE, input=None, branches=branches, **fields)


@pytest.fixture
def apps() -> Iterator[dict[str, Any]]:
    made: dict[str, Any] = {}
    for name, environ in {
        "default": {},
        "off": {"AGENTLOOP_PACK_SIZE": "1"},
        "fifty": {"AGENTLOOP_PACK_SIZE": "50"},
        "limits": {"AGENTLOOP_TASK_SOFT_TIME_LIMIT": "30", "AGENTLOOP_TASK_TIME_LIMIT": "40"},
        "version1": {"AGENTLOOP_WIRE_VERSION_OVERRIDE": "1"},
    }.items():
        made[name] = create_app(
            settings=load_settings(environ),
            overrides={"broker_url": "memory://", "result_backend": "cache+memory://"},
        )
    yield made
    for app in made.values():
        app.close()


def test_nothing_set_packs_what_the_rule_allows_and_a_set_size_overrides_it(apps: dict[str, Any]) -> None:
    task = lambda name: cast(Any, FakeTask(apps[name])).app  # noqa: E731
    assert pack_plan(task("default"), fan(1000, max_concurrency=None)) == (200, frozenset())
    assert pack_plan(task("default"), fan(10, solo=frozenset({3}))) == (9, frozenset({3}))
    assert pack_plan(task("default"), fan(10, max_concurrency=8))[0] == 8  # the composites' default bound
    assert pack_plan(task("off"), fan(1000, max_concurrency=None))[0] == 1
    assert pack_plan(task("default"), fan(10, pack_size=1))[0] == 1  # the composite's pack_size = 1
    assert pack_plan(task("fifty"), fan(1000, solo=frozenset({3}))) == (50, frozenset())  # yours: all loops
    assert pack_plan(task("limits"), fan(1000))[0] == 1  # user-set limits, a pool that may enforce them
    apps["limits"].agentloop_pool = "threads"  # which a threads worker does not
    assert pack_plan(task("limits"), fan(1000, max_concurrency=None))[0] == 200
    assert pack_plan(task("version1"), fan(1000, pack_size=50))[0] == 1  # it could not run one


class Recording:
    def __init__(self) -> None:
        self.blocked: list[tuple[str, float]] = []

    def pack_loop_blocked(self, runnable: str, seconds: float) -> None:
        self.blocked.append((runnable, seconds))

    def __getattr__(self, name: str) -> Any:  # every other instrument: counted elsewhere
        return lambda *args, **kwargs: None


def test_a_branch_that_blocks_its_packs_loop_is_named_in_the_log_its_events_and_the_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = RunnableRegistry()
    registry.register("awaits", Awaits)
    store = InMemoryRunStore()
    engine = WorkflowEngine(registry=registry, store=store, progress_interval=60, events_interval=60)
    store.create_run(run_id="r", runnable="fan", input=None)
    root = WorkflowNode(run_id="r", runnable="fan", fresh=True)
    nodes = [WorkflowEngine.branch_node(root, "awaits", str(k), 4, True) for k in range(4)]
    instruments = Recording()
    previous = metrics.use_instruments(cast(RunInstruments, instruments))
    try:
        with caplog.at_level(logging.WARNING, logger="agentloop.orchestration.runtime.engine"):
            outcomes = asyncio.run(engine.start_pack(nodes, [False, False, True, False]))
    finally:
        metrics.use_instruments(previous)

    assert [outcome.value for outcome in outcomes] == [2, 2, 2, 2]  # type: ignore[union-attr]
    blocked = [event for _, event in store.events("r") if event["phase"] == LOOP_BLOCKED]
    assert [event["path"] for event in blocked] == ["branch/2"]
    (event,) = blocked
    assert "Awaits.is_complete" in event["data"]["where"] and event["data"]["waited"] == 3
    assert event["data"]["seconds"] >= 0.2 and "pack_size = 1" in event["data"]["fix"]
    assert [runnable for runnable, _ in instruments.blocked] == ["awaits"]
    (line,) = [record.getMessage() for record in caplog.records if "blocked its pack" in record.getMessage()]
    assert "branch/2 (awaits)" in line and "asyncio.to_thread" in line


def test_a_pack_that_never_blocks_reports_nothing() -> None:
    registry = RunnableRegistry()
    registry.register("awaits", Awaits)
    store = InMemoryRunStore()
    engine = WorkflowEngine(registry=registry, store=store, progress_interval=60, events_interval=60)
    store.create_run(run_id="r", runnable="fan", input=None)
    root = WorkflowNode(run_id="r", runnable="fan", fresh=True)
    nodes = [WorkflowEngine.branch_node(root, "awaits", str(k), 3, True) for k in range(3)]

    asyncio.run(engine.start_pack(nodes, [False] * 3))

    assert [event for _, event in store.events("r") if event["phase"] == LOOP_BLOCKED] == []


#: What the plain branches of the pack below meet at: they block until the coroutine one releases them.
MEETING = {name: threading.Event() for name in ("loop", "step", "released")}


class BlockedPlain(BaseAgentLoop):
    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"released": None}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        MEETING["loop"].set()
        assert threading.current_thread() is not threading.main_thread()  # a pack's thread
        return {"released": MEETING["released"].wait(10)}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["released"] is not None

    def build_result(self, *, state: Any) -> Any:
        return state["released"]


@step
def blocked_step(value: Any) -> Any:
    MEETING["step"].set()
    return MEETING["released"].wait(10)


class Releasing(BaseAgentLoop):
    max_iterations = 100_000

    def create_initial_state(self, *, input: Any) -> Any:
        return {"done": False, "seen": None}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        if not (MEETING["loop"].is_set() and MEETING["step"].is_set()):
            await asyncio.sleep(0.001)
            return state
        MEETING["released"].set()
        return {"done": True, "seen": current_pack_threads() is not None}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return state["seen"]


def test_a_packs_plain_work_runs_in_its_threads_while_its_coroutine_branches_run_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for event in MEETING.values():
        event.clear()
    registry = RunnableRegistry()
    for name, runnable in (("plain", BlockedPlain), ("step", blocked_step), ("releasing", Releasing)):
        registry.register(name, runnable)
    store = InMemoryRunStore()
    engine = WorkflowEngine(registry=registry, store=store, progress_interval=60, events_interval=60)
    store.create_run(run_id="r", runnable="fan", input=None)
    root = WorkflowNode(run_id="r", runnable="fan", fresh=True)
    nodes = [WorkflowEngine.branch_node(root, name, name, 3, True) for name in ("plain", "step", "releasing")]

    with caplog.at_level(logging.WARNING, logger="agentloop.orchestration.runtime.engine"):
        outcomes = asyncio.run(engine.start_pack(nodes, [None, None, None]))

    # both plain functions were released by the coroutine branch, which ran while they blocked
    assert [outcome.value for outcome in outcomes] == [True, True, True]  # type: ignore[union-attr]
    assert [event for _, event in store.events("r") if event["phase"] == LOOP_BLOCKED] == []
    assert not [record for record in caplog.records if "blocked its pack" in record.getMessage()]


def test_outside_a_pack_plain_work_runs_on_the_event_loops_thread() -> None:
    class Where(Plain):
        def advance_state(self, *, state: Any, iteration: int) -> Any:  # type: ignore[override]
            return {**state, "n": state["n"] + 1, "thread": threading.current_thread().name}

        def build_result(self, *, state: Any) -> Any:
            return state["thread"]

    assert (
        InlineAgentRunner.create(runnable=Where).request_sync(input=False) == threading.current_thread().name
    )


def test_a_packs_coroutine_branches_share_a_context_per_spec_and_plain_ones_get_their_own() -> None:
    built: list[Any] = []

    def factory(spec: Any) -> Any:
        context = {"spec": dict(spec), "n": len(built)}
        built.append(context)
        return context

    class Seen(Awaits):
        def build_result(self, *, state: Any) -> Any:
            return self.context["n"]

    class PlainSeen(Seen):
        def advance_state(self, *, state: Any, iteration: int) -> Any:  # type: ignore[override]
            return {**state, "n": state["n"] + 1}

    registry = RunnableRegistry()
    registry.register("seen", Seen, context_factory=factory)
    registry.register("plain_seen", PlainSeen, context_factory=factory)
    store = InMemoryRunStore()
    engine = WorkflowEngine(registry=registry, store=store, progress_interval=60, events_interval=60)
    store.create_run(run_id="r", runnable="fan", input=None)
    root = WorkflowNode(run_id="r", runnable="fan", fresh=True)
    nodes = [WorkflowEngine.branch_node(root, "seen", str(k), 5, True) for k in range(3)]
    nodes += [WorkflowEngine.branch_node(root, "plain_seen", str(k), 5, True) for k in (3, 4)]

    outcomes = asyncio.run(engine.start_pack(nodes, [False] * 5))

    contexts = [outcome.value for outcome in outcomes]  # type: ignore[union-attr]
    assert contexts[:3] == [contexts[0]] * 3  # one context for the coroutine branches, built once
    assert len(set(contexts)) == 3 and len(built) == 3  # each plain branch (its own thread) its own

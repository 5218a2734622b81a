"""A pipeline's loop and action stages sharing ``agentloop.stages`` tasks, without a broker: the
rule's decisions (``orchestration/packing/rule.py``, ``pack_policy.stage_plan``), the chain the
compiler builds (``celery_adapter/canvas.py``), and the engine running a run of stages in one
task: each stage recorded as it ends, the stages left handed on after the task's time, and a
task delivered again skipping the stages that recorded a result (``docs/how-to/packing.md#pipelines``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kombu.exceptions import OperationalError
from test_canvas_shapes import FakeTask, Replaced, shape
from test_packing_rule import apps as apps_of_each_setting  # noqa: F401  (the fixture "apps")

from agentloop import BaseAgentLoop, BaseAgentPipeline, BaseCompositeAgent, Branch, step
from agentloop.orchestration.celery_adapter import tasks
from agentloop.orchestration.celery_adapter.canvas import continue_stages, continue_with, pipeline_stages
from agentloop.orchestration.celery_adapter.pack_policy import leading_stages, stage_plan
from agentloop.orchestration.celery_adapter.tasks import stages_here
from agentloop.orchestration.packing.rule import why_not_joined
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.runtime.next_step import ChainStages, Done, StagesLeft
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import (
    FINALIZE,
    PACK_TASKS,
    PIPELINE_DONE,
    STAGE,
    STAGES,
    WorkflowNode,
    needed_version,
)

#: Every stage execution, in order: ``(stage's input, its output)``.
EXECUTED: list[int] = []


class PlainAdd(BaseAgentLoop):
    """Adds one, in a plain ``advance_state``: joinable all the same (stages run one at a time)."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"value": input, "done": False}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        EXECUTED.append(state["value"])
        if state["value"] == "boom":
            raise ValueError("stage went boom")
        return {"value": state["value"] + 1, "done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return state["value"]


@step
def plain_step(value: Any) -> Any:
    return value


class Inner(BaseAgentPipeline):
    stages = (PlainAdd,)


class Fan(BaseCompositeAgent):
    branch_runnables = (PlainAdd,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=PlainAdd, input=input, key="0")]


class FiveAdds(BaseAgentPipeline):
    stages = (PlainAdd,) * 5


class Mixed(BaseAgentPipeline):
    stages = (PlainAdd, PlainAdd, Inner, PlainAdd, Fan, PlainAdd, PlainAdd, PlainAdd)


# ----- the rule ----------------------------------------------------------------------------------------


def test_loops_and_action_stages_join_whatever_their_hooks_and_what_expands_stays_a_link() -> None:
    assert why_not_joined(PlainAdd) is None  # a plain advance_state: no sibling to block
    assert why_not_joined(plain_step) is None
    assert "pipeline or a composite" in str(why_not_joined(Inner))
    assert "pipeline or a composite" in str(why_not_joined(Fan))
    assert why_not_joined(PlainAdd()) == "it is not a runnable class"


@pytest.fixture
def apps(request: pytest.FixtureRequest) -> dict[str, Any]:
    """An app per setting, as the packing rule's tests make them (``test_packing_rule.apps``)."""
    made: dict[str, Any] = request.getfixturevalue("apps_of_each_setting")
    return made


NODE = WorkflowNode(run_id="r", runnable="mixed", path="branch/0")
ALL = frozenset(range(8))


def chained(
    stages: int = 8, joinable: frozenset[int] = ALL, carries: bool = False, **fields: Any
) -> ChainStages:
    return ChainStages(
        node=NODE, input="in", stages=stages, carries_input=carries, joinable=joinable, **fields
    )


def test_nothing_set_joins_every_stage_and_a_set_size_or_the_deployment_says_otherwise(
    apps: dict[str, Any],
) -> None:
    assert stage_plan(apps["default"], chained()) == 8
    assert stage_plan(apps["off"], chained()) == 1  # AGENTLOOP_PACK_SIZE=1
    assert stage_plan(apps["default"], chained(pack_size=1)) == 1  # the pipeline's pack_size = 1
    assert stage_plan(apps["fifty"], chained()) == 50  # AGENTLOOP_PACK_SIZE=50: at most 50 a task
    assert stage_plan(apps["default"], chained(pack_size=2)) == 2
    assert stage_plan(apps["limits"], chained()) == 1  # a limit the user set would cover the run
    apps["limits"].agentloop_pool = "threads"  # which a threads worker does not enforce
    assert stage_plan(apps["limits"], chained()) == 8
    assert stage_plan(apps["version1"], chained(pack_size=4)) == 1  # it could not run agentloop.stages


def test_agentloop_stages_is_gated_and_routed_as_packs_are() -> None:
    assert STAGES in PACK_TASKS
    assert needed_version([], {}, STAGES) == 2
    assert needed_version([], {}, STAGE) == 1  # a chain link as before: any worker runs it


# ----- the chain -------------------------------------------------------------------------------------


def test_runs_of_joinable_stages_are_one_task_and_what_expands_is_a_stage_of_its_own(
    apps: dict[str, Any],
) -> None:
    node = NODE.to_dict()
    outcome = chained(joinable=frozenset({0, 1, 3, 5, 6, 7}))  # Mixed: 2 and 4 expand

    assert [shape(s) for s in pipeline_stages(FakeTask(apps["default"]), outcome)] == [
        (STAGES, ("in", node, 0, 2, None), {}, True),
        (STAGE, (node, 2, None), {}, False),
        (STAGE, (node, 3, None), {}, False),  # a run of one: the stage task as before
        (STAGE, (node, 4, None), {}, False),
        (STAGES, (node, 5, 3, None), {}, False),
        (PIPELINE_DONE, (node,), {}, False),
    ]
    capped = [shape(s) for s in pipeline_stages(FakeTask(apps["default"]), chained(pack_size=3))]
    assert [(name, args[-3:-1] if name == STAGES else args[-2:-1]) for name, args, _, _ in capped[:-1]] == [
        (STAGES, (0, 3)),
        (STAGES, (3, 3)),
        (STAGES, (6, 2)),
    ]


@pytest.mark.parametrize("app", ["off", "version1", "limits"])
def test_where_the_rule_does_not_join_the_chain_is_a_stage_task_each(apps: dict[str, Any], app: str) -> None:
    steps = pipeline_stages(FakeTask(apps[app]), chained(stages=3, carries=True))
    assert [shape(s)[0] for s in steps] == [STAGE, STAGE, STAGE, PIPELINE_DONE]


def test_the_stages_left_after_the_tasks_time_replace_it_and_an_expansion_runs_first(
    apps: dict[str, Any],
) -> None:
    task = FakeTask(apps["default"])
    assert continue_stages(task, Done(value=3)) == 3
    with pytest.raises(Replaced) as left:
        continue_stages(task, StagesLeft(node=NODE, previous=3, index=5, count=3, input="in"))
    assert shape(left.value.canvas) == (STAGES, (3, NODE.to_dict(), 5, 3, "in"), {}, True)

    inner = ChainStages(node=NODE, input=2, stages=1, carries_input=False)
    with pytest.raises(Replaced) as expanded:
        continue_stages(task, StagesLeft(node=NODE, previous=None, index=3, count=2, expanded=inner))
    assert shape(expanded.value.canvas) == (
        "chain",
        (STAGE, (2, NODE.to_dict(), 0, None), {}, True),
        (PIPELINE_DONE, (NODE.to_dict(),), {}, False),
        (STAGES, (NODE.to_dict(), 3, 2, None), {}, False),
    )


class BrokerAway(FakeTask):
    """A task whose ``replace`` finds the broker away ``away`` times first (kombu's error)."""

    def __init__(self, app: Any, away: int) -> None:
        super().__init__(app)
        self.away = away
        self.sent: list[Any] = []  # each canvas it was asked to send

    def replace(self, canvas: Any) -> Replaced:
        self.sent.append(canvas)
        if self.away:
            self.away -= 1
            raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        return super().replace(canvas)


def test_the_stages_left_are_sent_again_while_the_broker_is_away_as_a_chains_next_task_is(
    apps: dict[str, Any],
) -> None:
    """Task.replace's publish gives up at once on a broker that is away; a stage that ends during a
    Redis restart must carry its run on (tests/integration/test_redis_outage_mid_pipeline.py)."""
    task = BrokerAway(apps["default"], away=2)
    with pytest.raises(Replaced) as left:
        continue_stages(task, StagesLeft(node=NODE, previous=3, index=5, count=3, input="in"))
    assert task.away == 0 and shape(left.value.canvas)[0] == STAGES
    gone = BrokerAway(apps["default"], away=10_000)  # past the app's publish retry policy: raised
    policy = gone.app.conf.task_publish_retry_policy
    gone.app.conf.task_publish_retry_policy = {"max_retries": 2, "interval_start": 0, "interval_step": 0}
    try:
        with pytest.raises(OperationalError):
            continue_stages(gone, StagesLeft(node=NODE, previous=3, index=5, count=3, input="in"))
    finally:
        gone.app.conf.task_publish_retry_policy = policy
    assert gone.away == 10_000 - 3


def test_an_expansion_is_sent_again_while_the_broker_is_away_afresh_each_time(apps: dict[str, Any]) -> None:
    """``continue_with`` shares the retry: a composite's or a pipeline's task that expands during a
    Redis restart carries its run on (tests/integration/test_redis_outage_mid_pipeline.py), each
    try with a canvas of its own (``Task.replace`` links and freezes the one it is given)."""
    inner = ChainStages(node=NODE, input=2, stages=1, carries_input=False)
    left = StagesLeft(node=NODE, previous=None, index=3, count=2, expanded=inner)
    with pytest.raises(Replaced) as calm:
        continue_stages(FakeTask(apps["default"]), left)
    task = BrokerAway(apps["default"], away=2)
    with pytest.raises(Replaced) as stormy:
        continue_with(task, inner, then=apps["default"].signature(STAGES, args=(NODE.to_dict(), 3, 2, None)))
    assert task.away == 0 and shape(stormy.value.canvas) == shape(calm.value.canvas)
    assert len(task.sent) == 3 and len({id(canvas) for canvas in task.sent}) == 3


# ----- the task that expands a pipeline runs its first stages ----------------------------------------


def test_the_task_that_expands_a_pipeline_runs_its_first_joinable_stages_where_the_rule_joins(
    apps: dict[str, Any],
) -> None:
    assert leading_stages(apps["default"], chained()) == 8
    assert leading_stages(apps["default"], chained(joinable=frozenset({0, 1, 3, 5, 6, 7}))) == 2
    assert leading_stages(apps["default"], chained(joinable=frozenset({0, 2}))) == 1
    assert leading_stages(apps["default"], chained(pack_size=3)) == 3  # what one stages task runs
    assert leading_stages(apps["default"], chained(joinable=frozenset({1, 2}))) == 0  # stage 0 expands
    assert leading_stages(apps["default"], chained(pack_size=1)) == 0  # a task per stage, as asked
    for app in ("off", "limits", "version1"):
        assert leading_stages(apps[app], chained()) == 0  # the chain of a task per stage, as before


def test_the_rest_of_a_pipeline_begun_in_its_task_is_its_chain_from_there_then_what_follows(
    apps: dict[str, Any],
) -> None:
    task, node = FakeTask(apps["default"]), NODE.to_dict()
    pipeline = chained(joinable=frozenset({0, 1, 3, 5, 6, 7}))  # Mixed: 2 and 4 expand
    then = apps["default"].signature(FINALIZE, args=("r", "token"))
    left = StagesLeft(node=NODE, previous=2, index=2, count=6, pipeline=pipeline)
    with pytest.raises(Replaced) as rest:
        continue_stages(task, left, then=then)
    assert shape(rest.value.canvas) == (
        "chain",
        (STAGE, (2, node, 2, None), {}, True),  # fed the output of the stages run in the task
        (STAGE, (node, 3, None), {}, False),
        (STAGE, (node, 4, None), {}, False),
        (STAGES, (node, 5, 3, None), {}, False),
        (PIPELINE_DONE, (node,), {}, False),
        (FINALIZE, ("r", "token"), {}, False),
    )
    inner = ChainStages(node=NODE, input=2, stages=1, carries_input=False)
    left = StagesLeft(node=NODE, previous=None, index=3, count=5, expanded=inner, pipeline=pipeline)
    with pytest.raises(Replaced) as expanded:  # a stage that expanded runs first and feeds the rest
        continue_stages(task, left)
    assert shape(expanded.value.canvas) == (
        "chain",
        (STAGE, (2, node, 0, None), {}, True),
        (PIPELINE_DONE, (node,), {}, False),
        (STAGE, (node, 3, None), {}, False),
        (STAGE, (node, 4, None), {}, False),
        (STAGES, (node, 5, 3, None), {}, False),
        (PIPELINE_DONE, (node,), {}, False),
    )


# ----- the engine --------------------------------------------------------------------------------------


@pytest.fixture
def engine() -> Iterator[WorkflowEngine]:
    registry = RunnableRegistry()
    registry.register("five", FiveAdds)
    registry.register("mixed", Mixed)
    store = InMemoryRunStore()
    store.create_run(run_id="r", runnable="five", input=0)
    EXECUTED.clear()
    yield WorkflowEngine(registry=registry, store=store, progress_interval=60, events_interval=60)


FIVE = WorkflowNode(run_id="r", runnable="five", fresh=True)


def test_a_run_of_stages_records_each_as_it_ends_and_emits_each_stages_events(engine: WorkflowEngine) -> None:
    outcome = asyncio.run(engine.stages(0, FIVE, 0, 5, None))

    assert outcome == Done(value=5) and EXECUTED == [0, 1, 2, 3, 4]
    records = engine.store.loop_records("r", [f"pipeline/{i}" for i in range(5)])
    assert [(finished, result) for finished, result, _ in records] == [(True, i + 1) for i in range(5)]
    stage_events = [event["iteration"] for _, event in engine.store.events("r") if event["phase"] == "stage"]
    assert stage_events == [1, 2, 3, 4]  # stage i's "i of 5 stages done", as a chain of stage tasks


def test_after_its_time_the_stages_left_are_handed_on_one_recorded_stage_at_a_time(
    engine: WorkflowEngine,
) -> None:
    outcome = asyncio.run(engine.stages(0, FIVE, 0, 5, "in", seconds=0))
    assert outcome == StagesLeft(node=FIVE, previous=1, index=1, count=4, input="in")
    outcome = asyncio.run(engine.stages(1, FIVE, 1, 4, "in", seconds=0))
    assert outcome == StagesLeft(node=FIVE, previous=2, index=2, count=3, input="in")
    assert EXECUTED == [0, 1]


def test_a_run_delivered_again_skips_the_stages_that_recorded_a_result_in_one_read(
    engine: WorkflowEngine,
) -> None:
    asyncio.run(engine.stages(0, FIVE, 0, 3, None))  # a first try that got through stage 2 and died
    assert EXECUTED == [0, 1, 2]
    reads: list[list[str]] = []
    loop_records = engine.store.loop_records

    def counted(run_id: str, paths: Any) -> Any:
        reads.append(list(paths))
        return loop_records(run_id, paths)

    engine.store.loop_records = counted  # type: ignore[method-assign]
    again = WorkflowNode(run_id="r", runnable="five", fresh=False)  # its task was delivered again
    assert asyncio.run(engine.stages(0, again, 0, 5, None)) == Done(value=5)
    assert EXECUTED == [0, 1, 2, 3, 4]  # 3 and 4 ran; 0 to 2 never again
    assert reads == [[f"pipeline/{i}" for i in range(5)]]
    assert asyncio.run(engine.stages(0, again, 0, 5, None)) == Done(value=5)  # all recorded: nothing runs
    assert EXECUTED == [0, 1, 2, 3, 4]


def test_a_failing_stage_ends_the_run_of_stages_with_the_chains_error_and_events(
    engine: WorkflowEngine,
) -> None:
    engine.store.create_run(run_id="f", runnable="five", input="boom")
    node = WorkflowNode(run_id="f", runnable="five", fresh=True)

    with pytest.raises(ValueError, match="stage went boom"):
        asyncio.run(engine.stages("boom", node, 0, 5, None))

    assert EXECUTED == ["boom"]  # the stages after it never ran
    record = engine.store.get_run("f")
    assert record is not None and record.status == "failed" and "stage went boom" in str(record.error)
    failed = [
        (event["path"], event["phase"])
        for _, event in engine.store.events("f")
        if event["status"] == "failed"
    ]
    assert [path for path, _ in failed] == ["pipeline/0", ""]  # the stage, then the pipeline


def test_a_forged_range_of_stages_fails_the_run(engine: WorkflowEngine) -> None:
    engine.store.create_run(run_id="x", runnable="five", input=0)
    node = WorkflowNode(run_id="x", runnable="five", fresh=True)
    with pytest.raises(Exception, match="stages 3 to 6 of a pipeline of 5 stages"):
        asyncio.run(engine.stages(0, node, 3, 4, None))
    assert EXECUTED == []


def test_a_pipelines_pack_size_is_checked_like_a_composites(engine: WorkflowEngine) -> None:
    class Wrong(FiveAdds):
        pack_size = 0

    cast(Any, engine.registry).register("wrong", Wrong)
    engine.store.create_run(run_id="w", runnable="wrong", input=0)
    with pytest.raises(ValueError, match="pack_size must be a whole number of at least 1"):
        asyncio.run(engine.start(WorkflowNode(run_id="w", runnable="wrong", fresh=True), 0))


def test_a_pipeline_of_joinable_stages_runs_and_closes_in_the_task_that_expanded_it(
    apps: dict[str, Any], engine: WorkflowEngine
) -> None:
    started = asyncio.run(engine.start(FIVE, 0))
    assert isinstance(started, ChainStages) and started.joinable == frozenset(range(5))

    assert stages_here(FakeTask(apps["default"]), engine, started, None) == Done(value=5)

    assert EXECUTED == [0, 1, 2, 3, 4]
    root = [
        (event["phase"], event["iteration"]) for _, event in engine.store.events("r") if event["path"] == ""
    ]
    assert root == [("start", 0), *(("stage", i) for i in range(1, 6)), ("done", 5)]  # as its chain's
    records = engine.store.loop_records("r", [f"pipeline/{i}" for i in range(5)])
    assert [(finished, result) for finished, result, _ in records] == [(True, i + 1) for i in range(5)]


def test_what_the_task_that_expanded_a_pipeline_leaves_is_the_pipelines_rest(
    apps: dict[str, Any], engine: WorkflowEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine.store.create_run(run_id="m", runnable="mixed", input=0)
    mixed = WorkflowNode(run_id="m", runnable="mixed", fresh=True)
    started = asyncio.run(engine.start(mixed, 0))
    assert isinstance(started, ChainStages)
    assert stages_here(FakeTask(apps["off"]), engine, started, None) is started  # a task per stage
    assert EXECUTED == []

    left = stages_here(FakeTask(apps["default"]), engine, started, None)
    assert left == StagesLeft(node=mixed, previous=2, index=2, count=6, pipeline=started)  # Inner expands
    assert EXECUTED == [0, 1]

    monkeypatch.setattr(tasks, "JOINED_STAGES_SECONDS", 0)  # its time is up after one stage
    started = asyncio.run(engine.start(FIVE, 0))
    assert isinstance(started, ChainStages)
    left = stages_here(FakeTask(apps["default"]), engine, started, None)
    assert left == StagesLeft(node=FIVE, previous=1, index=1, count=4, pipeline=started)

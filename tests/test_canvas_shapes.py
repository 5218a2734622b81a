"""What the canvas compiler builds for each outcome, pinned without a broker or a worker.

A composite of width 1 is a chain of its branch and the merge (never a one-member group, which
Celery does not run safely inside a chain); from width 2 on it is a chord. A ``max_concurrency``
below the width runs the branches in that many lanes. A pipeline is a chain of its stages closed
by ``agentloop.pipeline_done``. The canvas is read back as nested tuples, so one comparison shows
the whole shape. Each composite here pins ``pack_size=1``: these are the shapes of one task per
branch (``test_canvas_packs.py`` has the packed ones).
"""

from __future__ import annotations

from typing import Any

import pytest
from celery import chord, group
from celery.canvas import _chain

from agentloop.orchestration.celery_adapter.canvas import (
    continue_lane,
    continue_with,
    fan_out,
    from_lanes,
    pipeline_stages,
)
from agentloop.orchestration.runtime.next_step import ChainStages, Done, FanOut
from agentloop.orchestration.wire import (
    FINALIZE,
    LANE,
    LANE_COLLECT,
    MERGE,
    PIPELINE_DONE,
    RUN,
    STAGE,
    BranchFailure,
    WorkflowNode,
)
from tests.canvas_support import FakeTask, Replaced

NODE = WorkflowNode(run_id="r", runnable="fan", path="pipeline/1")


def branch(index: int) -> tuple[WorkflowNode, Any]:
    return WorkflowNode(run_id="r", runnable="leaf", path=f"pipeline/1/branch/{index}"), {"n": index}


def shape(canvas: Any) -> Any:
    """A canvas as nested tuples: ``("chain", ...)`` (nested chains spliced), ``("chord", header,
    body)``, ``("group", ...)``, and each task as ``(name, args, kwargs, immutable)``."""
    if isinstance(canvas, chord):
        return ("chord", tuple(shape(t) for t in canvas.tasks), shape(canvas.body))
    if isinstance(canvas, _chain):  # a chain in a chain runs the same as its steps spliced in
        steps = [shape(t) for t in canvas.tasks]
        return ("chain", *(part for step in steps for part in (step[1:] if step[0] == "chain" else [step])))
    if isinstance(canvas, group):
        return ("group", *(shape(t) for t in canvas.tasks))
    return (canvas.task, tuple(canvas.args), dict(canvas.kwargs), bool(canvas.immutable))


def run_of(index: int) -> tuple[Any, ...]:
    child, child_input = branch(index)
    return (RUN, (child.to_dict(), child_input), {}, True)


# ----- composites -------------------------------------------------------------------------------------


def test_a_composite_of_width_one_is_its_branch_chained_to_the_merge_never_a_group(
    canvas_task: FakeTask,
) -> None:
    canvas = fan_out(canvas_task, FanOut(node=NODE, input="in", branches=[branch(0)], pack_size=1))

    assert shape(canvas) == ("chain", run_of(0), (MERGE, (NODE.to_dict(), "in", True), {}, False))


def test_a_composite_of_width_two_or_more_is_a_chord_of_its_branches_into_the_merge(
    canvas_task: FakeTask,
) -> None:
    for width in (2, 3):
        outcome = FanOut(node=NODE, input="in", branches=[branch(i) for i in range(width)], pack_size=1)
        canvas = fan_out(canvas_task, outcome)

        merge = (MERGE, (NODE.to_dict(), "in"), {}, False)
        assert shape(canvas) == ("chord", tuple(run_of(i) for i in range(width)), merge)


@pytest.mark.parametrize("bound", [None, 3, 4])
def test_a_concurrency_bound_at_or_above_the_width_changes_nothing(
    canvas_task: FakeTask, bound: int | None
) -> None:
    outcome = FanOut(
        node=NODE, input="in", branches=[branch(i) for i in range(3)], max_concurrency=bound, pack_size=1
    )
    canvas = fan_out(canvas_task, outcome)

    merge = (MERGE, (NODE.to_dict(), "in"), {}, False)
    assert shape(canvas) == ("chord", tuple(run_of(i) for i in range(3)), merge)


def lane_step(index: int, *, first: bool) -> tuple[Any, ...]:
    child, child_input = branch(index)
    if first:
        return (LANE, ([], child.to_dict(), child_input), {}, True)
    return (LANE, (child.to_dict(), child_input), {}, False)


def test_a_bound_below_the_width_runs_the_branches_in_that_many_lanes_into_one_merge(
    canvas_task: FakeTask,
) -> None:
    outcome = FanOut(
        node=NODE, input="in", branches=[branch(i) for i in range(5)], max_concurrency=2, pack_size=1
    )
    canvas = fan_out(canvas_task, outcome)

    lanes = (
        ("chain", lane_step(0, first=True), lane_step(2, first=False), lane_step(4, first=False)),
        ("chain", lane_step(1, first=True), lane_step(3, first=False)),
    )
    assert shape(canvas) == ("chord", lanes, (MERGE, (NODE.to_dict(), "in"), {"lanes": 2}, False))


def test_one_lane_is_chained_to_the_merge_and_a_lane_of_one_branch_is_that_branch(
    canvas_task: FakeTask,
) -> None:
    one_lane = FanOut(node=NODE, input="in", branches=[branch(0), branch(1)], max_concurrency=1, pack_size=1)
    single_merge = (MERGE, (NODE.to_dict(), "in", True), {"lanes": 1}, False)
    assert shape(fan_out(canvas_task, one_lane)) == (
        "chain",
        lane_step(0, first=True),
        lane_step(1, first=False),
        single_merge,
    )

    short_lanes = FanOut(
        node=NODE, input="in", branches=[branch(i) for i in range(3)], max_concurrency=2, pack_size=1
    )
    lanes = shape(fan_out(canvas_task, short_lanes))[1]
    assert lanes == (("chain", lane_step(0, first=True), lane_step(2, first=False)), lane_step(1, first=True))


def test_lane_outputs_come_back_in_branch_order() -> None:
    assert from_lanes([["b0", "b2", "b4"], ["b1", "b3"]]) == ["b0", "b1", "b2", "b3", "b4"]
    assert from_lanes([["b0", "b1"]]) == ["b0", "b1"]
    assert from_lanes([["b0"], ["b1"], ["b2"]]) == ["b0", "b1", "b2"]


# ----- pipelines --------------------------------------------------------------------------------------


@pytest.mark.parametrize("carries_input", [False, True])
def test_a_pipeline_is_its_stages_in_order_closed_by_pipeline_done(
    canvas_task: FakeTask, carries_input: bool
) -> None:
    outcome = ChainStages(node=NODE, input="in", stages=3, carries_input=carries_input)
    node, carried = NODE.to_dict(), "in" if carries_input else None

    assert [shape(s) for s in pipeline_stages(canvas_task, outcome)] == [
        (STAGE, ("in", node, 0, carried), {}, True),
        (STAGE, (node, 1, carried), {}, False),
        (STAGE, (node, 2, carried), {}, False),
        (PIPELINE_DONE, (node,), {}, False),
    ]


# ----- what a task does with an outcome ----------------------------------------------------------------


def test_a_value_is_returned_and_a_collected_failure_travels_as_a_value(canvas_task: FakeTask) -> None:
    failure = BranchFailure(capture="pipeline/1", type="ValueError", message="bad")
    assert continue_with(canvas_task, Done(value={"ok": 1})) == {"ok": 1}
    assert continue_with(canvas_task, failure) == failure.to_wire()


def test_an_expansion_replaces_the_task_and_what_follows_comes_after_it(canvas_task: FakeTask) -> None:
    finalize = canvas_task.app.signature(FINALIZE, args=("r",))
    width_one = FanOut(node=NODE, input="in", branches=[branch(0)], pack_size=1)
    stages = ChainStages(node=NODE, input="in", stages=1, carries_input=False)

    with pytest.raises(Replaced) as fanned:
        continue_with(canvas_task, width_one, then=finalize)
    with pytest.raises(Replaced) as chained:
        continue_with(canvas_task, stages, then=finalize)

    merge = (MERGE, (NODE.to_dict(), "in", True), {}, False)
    assert shape(fanned.value.canvas) == ("chain", run_of(0), merge, (FINALIZE, ("r",), {}, False))
    with pytest.raises(Replaced) as alone:
        continue_with(canvas_task, width_one)  # nothing follows: the expansion is all
    assert shape(alone.value.canvas) == ("chain", run_of(0), merge)
    assert shape(chained.value.canvas) == (
        "chain",
        (STAGE, ("in", NODE.to_dict(), 0, None), {}, True),
        (PIPELINE_DONE, (NODE.to_dict(),), {}, False),
        (FINALIZE, ("r",), {}, False),
    )


def test_a_branch_in_a_lane_adds_its_output_to_the_lanes_or_collects_it_after_its_expansion(
    canvas_task: FakeTask,
) -> None:
    failure = BranchFailure(capture="pipeline/1", type="ValueError", message="bad")
    assert continue_lane(canvas_task, Done(value="b2"), ["b0"]) == ["b0", "b2"]
    assert continue_lane(canvas_task, failure, ["b0"]) == ["b0", failure.to_wire()]

    with pytest.raises(Replaced) as expanded:
        continue_lane(canvas_task, ChainStages(node=NODE, input="in", stages=1, carries_input=False), ["b0"])

    assert shape(expanded.value.canvas) == (
        "chain",
        (STAGE, ("in", NODE.to_dict(), 0, None), {}, True),
        (PIPELINE_DONE, (NODE.to_dict(),), {}, False),
        (LANE_COLLECT, (["b0"],), {}, False),
    )

"""What the canvas compiler builds for a composite whose branches are packed, pinned without a
broker or a worker (``celery_adapter/canvas.py``; ``docs/how-to/packing.md``).

Consecutive loop branches go ``pack_size`` to an ``agentloop.pack`` task; a branch that expands
(a pipeline or a composite) is an ``agentloop.lane`` step of its own; unbounded, the steps are a
chord whose merge concatenates their lists; under a ``max_concurrency`` below the width, packs of
at most that many run in ``max(1, bound // size)`` lanes.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from test_canvas_shapes import shape

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.canvas import continue_pack, fan_out
from agentloop.orchestration.celery_adapter.edge import MAX_BODY_BYTES
from agentloop.orchestration.celery_adapter.outgoing import MAX_OUTPUT_DEPTH
from agentloop.orchestration.errors import InvalidNodeError, UnsendableMessageError
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.runtime.next_step import Done, FanOut
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.wire import LANE, MERGE, PACK, RUN, BranchFailure, WorkflowNode, packed_branches
from tests.canvas_support import FakeTask

NODE = WorkflowNode(run_id="r", runnable="fan", path="pipeline/1")


def branches(width: int) -> list[tuple[WorkflowNode, Any]]:
    return [(WorkflowEngine.branch_node(NODE, "leaf", str(i), width, True), {"n": i}) for i in range(width)]


def pack(indexes: list[int], width: int, *, first: bool) -> tuple[Any, ...]:
    entries = [["leaf", str(i), {"n": i}] for i in indexes]
    lead: tuple[Any, ...] = ([],) if first else ()
    return (PACK, (*lead, NODE.to_dict(), entries, width, True), {}, first)


def test_unbounded_branches_go_pack_size_to_a_task_in_a_chord_whose_merge_concatenates(
    canvas_task: FakeTask,
) -> None:
    outcome = FanOut(node=NODE, input="in", branches=branches(5), pack_size=2)

    header = (pack([0, 1], 5, first=True), pack([2, 3], 5, first=True), pack([4], 5, first=True))
    merge = (MERGE, (NODE.to_dict(), "in"), {"packed": True}, False)
    assert shape(fan_out(canvas_task, outcome)) == ("chord", header, merge)


def test_one_pack_of_all_branches_is_chained_to_the_merge(canvas_task: FakeTask) -> None:
    outcome = FanOut(node=NODE, input="in", branches=branches(3), pack_size=10)

    merge = (MERGE, (NODE.to_dict(), "in", True), {"packed": True}, False)
    assert shape(fan_out(canvas_task, outcome)) == ("chain", pack([0, 1, 2], 3, first=True), merge)


def test_a_branch_that_expands_is_a_lane_step_of_its_own_between_packs(canvas_task: FakeTask) -> None:
    children = branches(4)
    outcome = FanOut(node=NODE, input="in", branches=children, pack_size=3, expanding=frozenset({1}))

    nested, nested_input = children[1]
    header = (
        pack([0], 4, first=True),
        (LANE, ([], nested.to_dict(), nested_input), {}, True),
        pack([2, 3], 4, first=True),
    )
    assert shape(fan_out(canvas_task, outcome))[1] == header


def test_under_a_bound_packs_hold_at_most_the_bound_and_run_in_lanes(canvas_task: FakeTask) -> None:
    # bound 4, pack size 2: two lanes (branch i in lane i % 2), each a chain of packs of 2
    outcome = FanOut(node=NODE, input="in", branches=branches(7), pack_size=2, max_concurrency=4)

    lanes = (
        ("chain", pack([0, 2], 7, first=True), pack([4, 6], 7, first=False)),
        ("chain", pack([1, 3], 7, first=True), pack([5], 7, first=False)),
    )
    assert shape(fan_out(canvas_task, outcome)) == (
        "chord",
        lanes,
        (MERGE, (NODE.to_dict(), "in"), {"lanes": 2}, False),
    )


def test_a_pack_size_above_the_bound_is_cut_to_it_in_one_lane(canvas_task: FakeTask) -> None:
    outcome = FanOut(node=NODE, input="in", branches=branches(5), pack_size=100, max_concurrency=2)

    lane = ("chain", pack([0, 1], 5, first=True), pack([2, 3], 5, first=False), pack([4], 5, first=False))
    merge = (MERGE, (NODE.to_dict(), "in", True), {"lanes": 1}, False)
    assert shape(fan_out(canvas_task, outcome)) == ("chain", *lane[1:], merge)


def test_the_deployments_pack_size_serves_a_composite_without_its_own() -> None:
    settings = load_settings({"AGENTLOOP_PACK_SIZE": "3"})
    app = create_app(settings=settings.model_copy(update={"broker_url": "memory://"}))
    try:
        canvas = fan_out(FakeTask(app), FanOut(node=NODE, input="in", branches=branches(3)))
        assert shape(canvas)[1] == pack([0, 1, 2], 3, first=True)
        one_each = fan_out(FakeTask(app), FanOut(node=NODE, input="in", branches=branches(2), pack_size=1))
        assert [step[0] for step in shape(one_each)[1]] == [RUN, RUN]  # the composite's own 1 wins
    finally:
        app.close()


def test_a_pack_appends_its_outputs_and_failures_to_what_was_collected(canvas_task: FakeTask) -> None:
    failure = BranchFailure(capture="pipeline/1", type="ValueError", message="no")
    values = continue_pack(canvas_task, [Done(value=1), failure, Done(value=[3])], ["before"])  # type: ignore[arg-type]

    assert values == ["before", 1, failure.to_wire(), [3]]


def test_a_packed_branch_that_expands_fails_the_pack_with_a_clear_error(canvas_task: FakeTask) -> None:
    expansion = FanOut(node=NODE, input=None, branches=branches(2))
    with pytest.raises(InvalidNodeError, match="only loops and stages are packed"):
        continue_pack(canvas_task, [expansion], [])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [[], "x", [["leaf", "0"]], [[1, "0", None]], [["leaf", "", None]], [["leaf", "a/b", None]]],
)
def test_a_malformed_list_of_packed_branches_is_an_invalid_node(data: Any) -> None:
    with pytest.raises(InvalidNodeError):
        packed_branches(data)


def test_a_branch_node_carries_every_field_of_its_parent_but_where_it_sits() -> None:
    """``WorkflowNode.child`` builds the node field by field (it runs once per branch): a field
    added to the node and forgotten there would be lost by every branch; this names it."""
    import dataclasses

    from agentloop.orchestration.wire import Ancestor

    parent = WorkflowNode(
        run_id="r",
        runnable="fan",
        path="p",
        context={"documents": ["d"]},
        capture="c",
        deadline=12.5,
        owner_token="secret",
        fresh=True,
        record=True,
    )
    ancestor = Ancestor(kind="composite", runnable="fan", path="p", position="0", width=2, fail_fast=True)
    child = parent.child(runnable="loop", segment="branch/0", parent=ancestor)

    placed = {"runnable": "loop", "path": "p/branch/0", "ancestors": (ancestor,)}
    for field in dataclasses.fields(WorkflowNode):
        expected = placed.get(field.name, getattr(parent, field.name))
        assert getattr(child, field.name) == expected, field.name


def _packs_of(step: Any) -> list[tuple[Any, ...]]:
    """The pack steps of one lane, in order (a lane is a chain of packs, or one pack)."""
    return list(step[1:]) if step[0] == "chain" else [step]


def test_a_bound_the_pack_size_does_not_divide_never_runs_more_than_the_bound_at_once(
    canvas_task: FakeTask,
) -> None:
    # bound 5, packs of 2, 9 branches: each lane runs one pack at a time, so at most
    # (lanes x the largest pack of a lane) branches run at once: never more than 5
    outcome = FanOut(node=NODE, input="in", branches=branches(9), pack_size=2, max_concurrency=5)

    kind, lanes, merge = shape(fan_out(canvas_task, outcome))

    assert kind == "chord" and merge[2] == {"lanes": len(lanes)}
    packs = [_packs_of(lane) for lane in lanes]
    at_once = sum(max(len(step[1][-3]) for step in lane) for lane in packs)
    assert at_once <= 5
    ran = sorted(int(entry[1]) for lane in packs for step in lane for entry in step[1][-3])
    assert ran == list(range(9))  # every branch once


class SendingTask(FakeTask):
    """A pack task as ``sendable`` reads it (a request whose run it cannot name: nothing to end)."""

    name = "agentloop.pack"
    request = SimpleNamespace(id="t-1", args=None, kwargs=None)

    def run(self, node: Any) -> None:  # a signature no empty call binds to: no run is ended
        """The task's body (never called)."""


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_a_packed_output_over_the_depth_or_size_limit_is_refused_before_it_is_sent(
    canvas_task: FakeTask,
) -> None:
    sending = SendingTask(canvas_task.app)
    half = "x" * (MAX_BODY_BYTES // 2 + 16)

    with pytest.raises(UnsendableMessageError, match=f"nested deeper than {MAX_OUTPUT_DEPTH}"):
        continue_pack(sending, [Done(value=1), Done(value=_nested(MAX_OUTPUT_DEPTH + 1))], [])  # type: ignore[arg-type]
    with pytest.raises(UnsendableMessageError, match="together they are"):  # each fits, not both
        continue_pack(sending, [Done(value=half), Done(value=half)], [])  # type: ignore[arg-type]
    with pytest.raises(UnsendableMessageError, match="together they are"):  # with what came before
        continue_pack(sending, [Done(value=half)], [half])  # type: ignore[arg-type]
    assert continue_pack(sending, [Done(value=_nested(MAX_OUTPUT_DEPTH))], []) == [_nested(MAX_OUTPUT_DEPTH)]  # type: ignore[arg-type]

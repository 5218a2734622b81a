"""The canvas compiler: an engine :data:`~agentloop.orchestration.runtime.next_step.Outcome` becomes a task's
return
value, or the canvas the task replaces itself with.

A pipeline becomes a ``chain`` of stage tasks closed by ``agentloop.pipeline_done``: consecutive
loop and action stages share an ``agentloop.stages`` task where the rule allows
(``docs/how-to/packing.md#pipelines``), every other stage is an ``agentloop.stage`` of its own
(the task that expands the pipeline runs the first of those runs itself, ``tasks.stages_here``,
and the chain is what is left: :func:`continue_stages`);
a composite becomes a ``chord`` of branch tasks whose body is ``agentloop.merge``.
Both are expanded at run time (``Task.replace``), so a width can depend on the
previous stage's output, and shapes nest both ways. A composite of width 1 is
chained, never a one-member group (unsafe inside a chain in Celery).

A composite whose ``max_concurrency`` is below its width runs its branches in
that many *lanes*: each lane is a chain of ``agentloop.lane`` tasks (branch
``i`` in lane ``i % k``), so at most ``k`` branches run at once, and the chord
of lanes feeds one merge, which puts the outputs back in branch order. Lanes
are plain canvas: no slot to leak when a worker dies, no polling retries, and
the results keep their order by construction. The price: a lane's next branch
waits for the one before it even when another lane is idle, and each lane task
carries the outputs of its lane so far.

A composite whose pack size (its ``pack_size``, else ``AGENTLOOP_PACK_SIZE``, else the packing
rule's: ``orchestration/packing/rule.py``, ``pack_policy.py``) is above 1 *packs* its loop
branches: up to that many consecutive ones go to one ``agentloop.pack`` task, which runs them
together on its event loop (``docs/how-to/packing.md``), routed to the holding queue of the wire
version that reads packs (``pack_policy.PackRouter``). A branch that expands into a canvas of its
own (a pipeline or a composite), or that the rule keeps apart (when no size was set), is never
packed: it is an ``agentloop.lane`` step between the packs. Every step, pack or lane, takes the outputs
collected before it and appends its own, so the same shapes serve: unbounded, a chord of
steps (each starting from ``[]``) whose merge concatenates their lists in order; bounded by
``max_concurrency`` (``M``), packs of at most ``M`` branches in ``max(1, M // size)`` lanes.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

from celery import Signature, Task, chain, chord
from kombu.exceptions import OperationalError

from agentloop.orchestration.celery_adapter.branch_slots import branch_limit_of
from agentloop.orchestration.celery_adapter.outgoing import check_canvas, check_output, check_outputs
from agentloop.orchestration.celery_adapter.pack_policy import pack_plan, stage_plan
from agentloop.orchestration.celery_adapter.result_channels import unwatched_results
from agentloop.orchestration.celery_adapter.run_failures import end_run_on_failure
from agentloop.orchestration.errors import InvalidNodeError, UnsendableMessageError
from agentloop.orchestration.runtime.next_step import (
    ChainStages,
    Done,
    FanOut,
    LeavesPack,
    Outcome,
    StagesLeft,
)
from agentloop.orchestration.wire import (
    LANE,
    LANE_COLLECT,
    MERGE,
    PACK,
    PACK_COLLECT,
    PIPELINE_DONE,
    RUN,
    STAGE,
    STAGES,
    Ancestor,
    BranchFailure,
)


def continue_with(task: Task, outcome: Outcome, then: Signature | None = None) -> Any:
    """Return the outcome's value, or replace ``task`` with the canvas it expands into.

    ``then`` (e.g. the run's ``agentloop.finalize``) follows an expansion; a
    value returned here is the caller's to finish.
    """
    if isinstance(outcome, Done):
        sendable(task, check_output, outcome.value, task.name)  # it travels on in the next task's message
        return outcome.value
    if isinstance(outcome, BranchFailure):
        return outcome.to_wire()  # travels on to the composite that collects it

    def build() -> Signature:
        tail = [then.clone()] if then is not None else []
        if isinstance(outcome, ChainStages):
            return chain(*pipeline_stages(task, outcome), *tail)
        return chain(fan_out(task, outcome), *tail)

    canvas = build()
    sendable(task, check_canvas, canvas)  # a message the workers' edge would refuse fails the run here
    replace_with(task, canvas, build)


def replace_with(task: Task, canvas: Signature, build: Callable[[], Signature]) -> NoReturn:
    """Replace ``task`` with ``canvas``, sent again while the broker is away.

    ``Task.replace``'s publish gives up at once on a broker that is away (kombu raises from the
    producer's channel), where a chain's next message is retried (``config.PUBLISH_RETRY_POLICY``);
    it is retried here the same way, so a task that ends during a broker restart carries its run
    on (the message it was delivered in is acknowledged only once the canvas is sent). Each retry
    sends a canvas ``build`` makes afresh: ``Task.replace`` changes the one it is given (it links
    and freezes it). This process never waits on the canvas's results."""
    policy = task.app.conf.task_publish_retry_policy or {}
    for attempt in itertools.count():
        try:
            with unwatched_results(task.app):
                raise task.replace(canvas if attempt == 0 else build())
        except OperationalError:
            if attempt >= int(policy.get("max_retries", 3)):
                raise
            start, step = float(policy.get("interval_start", 0)), float(policy.get("interval_step", 0.2))
            time.sleep(min(start + step * attempt, float(policy.get("interval_max", 1.0))))
    raise AssertionError("unreachable")  # pragma: no cover


def sendable(task: Task, check: Callable[..., None], *args: Any) -> None:
    """``check(*args)``; a message the workers' edge would refuse ends the run with the
    :class:`UnsendableMessageError` here, before the task's failed result is stored (Celery stores
    it before ``on_failure`` runs): whoever reads the failed result finds the run ended too."""
    try:
        check(*args)
    except UnsendableMessageError as error:
        request = task.request
        end_run_on_failure(task, error, request.id, request.args, request.kwargs, None)
        raise


def pipeline_stages(
    task: Task, outcome: ChainStages, start: int = 0, lead: tuple[Any, ...] | None = None
) -> list[Signature]:
    """The stage tasks of a pipeline from stage ``start`` on, then the task that closes it:
    consecutive stages the rule lets share a task (``outcome.joinable``) go up to
    :func:`stage_plan`'s number to one ``agentloop.stages``; a stage alone is an
    ``agentloop.stage``. The first is fed ``lead`` (by default the pipeline's input; ``()``: the
    output of the canvas before it)."""
    app, node = task.app, outcome.node.to_dict()
    first, carried = (outcome.input,) if lead is None else lead, outcome.carried
    steps: list[Signature] = []
    for index, count in _stage_runs(outcome, stage_plan(app, outcome) if outcome.joinable else 1, start):
        head = first if index == start else ()
        if count == 1:
            steps.append(app.signature(STAGE, args=(*head, node, index, carried), immutable=bool(head)))
        else:
            steps.append(
                app.signature(STAGES, args=(*head, node, index, count, carried), immutable=bool(head))
            )
    steps.append(app.signature(PIPELINE_DONE, args=(node,)))
    return steps


def _stage_runs(outcome: ChainStages, size: int, start: int = 0) -> list[tuple[int, int]]:
    """The pipeline's stages from ``start`` in order as ``(first, count)`` runs: at most ``size``
    consecutive joinable stages each; every other stage a run of one."""
    runs: list[tuple[int, int]] = []
    for index in range(start, outcome.stages):
        if runs and index in outcome.joinable and index - 1 in outcome.joinable:
            first, count = runs[-1]
            if first + count == index and count < size:
                runs[-1] = (first, count + 1)
                continue
        runs.append((index, 1))
    return runs


def continue_stages(task: Task, outcome: Outcome | StagesLeft, then: Signature | None = None) -> Any:
    """An ``agentloop.stages`` task's outcome, as :func:`continue_with` continues it; the stages
    left after its time replace it, in an ``agentloop.stages`` task of their own (after the
    canvas of a stage that expanded, fed its output). The rest of a pipeline whose first stages
    ran in the task that expanded it (``outcome.pipeline``) is its chain from there, then ``then``."""
    if not isinstance(outcome, StagesLeft):
        return continue_with(task, outcome, then=then)
    if outcome.pipeline is not None:
        return _continue_pipeline(task, outcome, outcome.pipeline, then)
    app, node = task.app, outcome.node.to_dict()
    if outcome.expanded is not None:
        rest = app.signature(STAGES, args=(node, outcome.index, outcome.count, outcome.input))
        return continue_with(task, outcome.expanded, then=rest)
    sendable(task, check_output, outcome.previous, task.name)
    args = (outcome.previous, node, outcome.index, outcome.count, outcome.input)

    def build() -> Signature:
        return app.signature(STAGES, args=args, immutable=True)

    canvas = build()
    sendable(task, check_canvas, canvas)
    replace_with(task, canvas, build)


def _continue_pipeline(task: Task, left: StagesLeft, pipeline: ChainStages, then: Signature | None) -> Any:
    """Replace ``task`` with the chain of ``pipeline`` from the stage ``left`` names, closed by
    ``agentloop.pipeline_done``, then ``then`` (after the canvas of a stage that expanded)."""
    tail = [then] if then is not None else []
    if left.expanded is not None:
        rest = chain(*pipeline_stages(task, pipeline, left.index, lead=()), *tail)
        return continue_with(task, left.expanded, then=rest)
    sendable(task, check_output, left.previous, task.name)

    def build() -> Signature:
        steps = pipeline_stages(task, pipeline, left.index, lead=(left.previous,))
        return chain(*steps, *(step.clone() for step in tail))

    canvas = build()
    sendable(task, check_canvas, canvas)
    replace_with(task, canvas, build)


def fan_out(task: Task, outcome: FanOut) -> Signature:
    """The branches of a composite and the merge that fans them in."""
    app, node = task.app, outcome.node.to_dict()
    size, solo = pack_plan(app, outcome)
    branch_limit = branch_limit_of(app, outcome.node) if size > 1 else None
    if branch_limit is not None:  # a pack takes its branches' slots at once: it must fit (branch_slots.py)
        size = min(size, branch_limit)
    if size > 1 and len(outcome.branches) - len(outcome.expanding) - len(solo) > 1:
        return fan_out_packed(task, replace(outcome, expanding=outcome.expanding | solo), size)
    if outcome.max_concurrency is not None and outcome.max_concurrency < len(outcome.branches):
        return fan_out_in_lanes(task, outcome, outcome.max_concurrency)
    header = [
        app.signature(RUN, args=(child.to_dict(), child_input), immutable=True)
        for child, child_input in outcome.branches
    ]
    if len(header) == 1:
        return chain(header[0], app.signature(MERGE, args=(node, outcome.input, True)))
    return chord(header, app.signature(MERGE, args=(node, outcome.input)))


def fan_out_in_lanes(task: Task, outcome: FanOut, lanes: int) -> Signature:
    """The branches of a composite in ``lanes`` chains run side by side, and the merge."""
    app, node = task.app, outcome.node.to_dict()
    chains: list[Signature] = []
    for lane in range(lanes):
        (first, first_input), *rest = outcome.branches[lane::lanes]
        steps = [app.signature(LANE, args=([], first.to_dict(), first_input), immutable=True)]
        steps += [app.signature(LANE, args=(child.to_dict(), child_input)) for child, child_input in rest]
        chains.append(chain(*steps) if len(steps) > 1 else steps[0])
    if lanes == 1:
        return chain(chains[0], app.signature(MERGE, args=(node, outcome.input, True), kwargs={"lanes": 1}))
    return chord(chains, app.signature(MERGE, args=(node, outcome.input), kwargs={"lanes": lanes}))


def fan_out_packed(task: Task, outcome: FanOut, size: int) -> Signature:
    """The branches of a composite packed ``size`` to a task (see the module doc), and the merge."""
    app, node, width = task.app, outcome.node.to_dict(), len(outcome.branches)
    bound = outcome.max_concurrency
    if bound is None or bound >= width:
        header = [_step(task, outcome, group, first=True) for group in _groups(outcome, range(width), size)]
        packed = {"packed": True}
        if len(header) == 1:
            return chain(header[0], app.signature(MERGE, args=(node, outcome.input, True), kwargs=packed))
        return chord(header, app.signature(MERGE, args=(node, outcome.input), kwargs=packed))
    size = min(size, bound)
    lanes = min(width, max(1, bound // size))
    chains: list[Signature] = []
    for lane in range(lanes):
        groups = _groups(outcome, range(lane, width, lanes), size)
        steps = [_step(task, outcome, group, first=index == 0) for index, group in enumerate(groups)]
        chains.append(chain(*steps) if len(steps) > 1 else steps[0])
    if lanes == 1:
        return chain(chains[0], app.signature(MERGE, args=(node, outcome.input, True), kwargs={"lanes": 1}))
    return chord(chains, app.signature(MERGE, args=(node, outcome.input), kwargs={"lanes": lanes}))


def _groups(outcome: FanOut, indexes: range, size: int) -> list[list[int]]:
    """``indexes`` in order, cut into packs of at most ``size`` loop branches; a branch that
    expands into a canvas is a group of its own."""
    groups: list[list[int]] = []
    current: list[int] = []
    for index in indexes:
        if index in outcome.expanding:
            groups += [current, [index]] if current else [[index]]
            current = []
            continue
        current.append(index)
        if len(current) == size:
            groups.append(current)
            current = []
    return [*groups, current] if current else groups


def _step(task: Task, outcome: FanOut, group: list[int], *, first: bool) -> Signature:
    """One step of a lane or of the chord: ``agentloop.pack`` for loop branches, ``agentloop.lane``
    for a branch that expands; the first of a chain starts from no outputs collected."""
    lead: tuple[list[Any], ...] = ([],) if first else ()
    if group[0] in outcome.expanding:
        child, child_input = outcome.branches[group[0]]
        return task.app.signature(LANE, args=(*lead, child.to_dict(), child_input), immutable=first)
    parent: Ancestor = outcome.branches[group[0]][0].ancestors[-1]
    branches = [
        [child.runnable, child.ancestors[-1].position, child_input]
        for child, child_input in (outcome.branches[index] for index in group)
    ]
    args = (*lead, outcome.node.to_dict(), branches, parent.width, parent.fail_fast)
    return task.app.signature(PACK, args=args, immutable=first)


def continue_pack(task: Task, outcomes: list[Outcome | LeavesPack], collected: list[Any]) -> list[Any]:
    """The outputs collected before a pack with its branches' appended, in order (a branch's
    :class:`BranchFailure` as its value, for the composite that collects it).

    Branches that wait for a person (:class:`LeavesPack`) leave it: the pack replaces itself
    with an ``agentloop.lane`` task for each of them (each records its question and resumes
    alone from its checkpoint once answered) and ``agentloop.pack_collect``, which puts their
    outputs in their places among the others'."""
    outputs: list[Any] = []
    leaving: list[tuple[int, LeavesPack]] = []
    for outcome in outcomes:
        if isinstance(outcome, Done):
            outputs.append(outcome.value)
        elif isinstance(outcome, BranchFailure):
            outputs.append(outcome.to_wire())
        elif isinstance(outcome, LeavesPack):
            leaving.append((len(collected) + len(outputs), outcome))
            outputs.append(None)  # its place, filled by pack_collect
        else:  # fan_out never packs a pipeline or a composite
            raise InvalidNodeError("a packed branch expanded into a canvas: only loops and stages are packed")
    result = [*collected, *outputs]  # the pack's result: one message, to the lane's next step or the merge
    sendable(task, check_outputs, result, task.name)
    if not leaving:
        return result
    app, places = task.app, [place for place, _ in leaving]

    def build() -> Signature:
        alone = [
            app.signature(LANE, args=([], branch.node.to_dict(), branch.input), immutable=True)
            for _, branch in leaving
        ]
        if len(alone) == 1:
            return chain(alone[0], app.signature(PACK_COLLECT, args=(result, places, True)))
        return chord(alone, app.signature(PACK_COLLECT, args=(result, places)))

    canvas = build()
    sendable(task, check_canvas, canvas)
    replace_with(task, canvas, build)


def fill_places(lanes: list[list[Any]], result: list[Any], places: list[int]) -> list[Any]:
    """``result`` with each branch that left its pack's output (the single output of its lane,
    in ``lanes``) in its place."""
    filled = list(result)
    for place, lane in zip(places, lanes, strict=True):
        (filled[place],) = lane
    return filled


def continue_lane(task: Task, outcome: Outcome, collected: list[Any]) -> Any:
    """A branch run in a lane: the lane's outputs so far with this branch's appended, now or
    (when the branch expands into a canvas) by ``agentloop.lane_collect`` after it."""
    if isinstance(outcome, Done):
        sendable(task, check_output, outcome.value, task.name)
        return [*collected, outcome.value]
    if isinstance(outcome, BranchFailure):
        return [*collected, outcome.to_wire()]
    return continue_with(task, outcome, then=task.app.signature(LANE_COLLECT, args=(collected,)))


def from_lanes(outputs: list[list[Any]]) -> list[Any]:
    """The lanes' outputs back in branch order (branch ``i`` ran in lane ``i % len(outputs)``)."""
    lanes = len(outputs)
    width = sum(len(lane) for lane in outputs)
    return [outputs[index % lanes][index // lanes] for index in range(width)]

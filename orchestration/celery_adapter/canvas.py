"""The canvas compiler: an engine :data:`~orchestration.engine.Outcome` becomes a task's return
value, or the canvas the task replaces itself with.

A pipeline becomes a ``chain`` of stage tasks closed by ``agentloop.pipeline_done``;
a composite becomes a ``chord`` of branch tasks whose body is ``agentloop.merge``.
Both are expanded at run time (``Task.replace``), so a width can depend on the
previous stage's output, and shapes nest both ways. A composite of width 1 is
chained, never a one-member group (unsafe inside a chain in Celery).
"""

from __future__ import annotations

from typing import Any

from celery import Signature, Task, chain, chord

from orchestration.engine import ChainStages, Done, FanOut, Outcome
from orchestration.wire import MERGE, PIPELINE_DONE, RUN, STAGE, BranchFailure


def continue_with(task: Task, outcome: Outcome, then: Signature | None = None) -> Any:
    """Return the outcome's value, or replace ``task`` with the canvas it expands into.

    ``then`` (e.g. the run's ``agentloop.finalize``) follows an expansion; a
    value returned here is the caller's to finish.
    """
    if isinstance(outcome, Done):
        return outcome.value
    if isinstance(outcome, BranchFailure):
        return outcome.to_wire()  # travels on to the composite that collects it
    tail = [then] if then is not None else []
    if isinstance(outcome, ChainStages):
        raise task.replace(chain(*pipeline_stages(task, outcome), *tail))
    raise task.replace(chain(fan_out(task, outcome), *tail))


def pipeline_stages(task: Task, outcome: ChainStages) -> list[Signature]:
    """The stage tasks of a pipeline, then the task that closes it."""
    app, node = task.app, outcome.node.to_dict()
    # The pipeline's own input rides along with each stage only when it reads it.
    carried = outcome.input if outcome.carries_input else None
    steps = [app.signature(STAGE, args=(outcome.input, node, 0, carried), immutable=True)]
    steps += [app.signature(STAGE, args=(node, index, carried)) for index in range(1, outcome.stages)]
    steps.append(app.signature(PIPELINE_DONE, args=(node,)))
    return steps


def fan_out(task: Task, outcome: FanOut) -> Signature:
    """The branches of a composite and the merge that fans them in."""
    app, node = task.app, outcome.node.to_dict()
    header = [
        app.signature(RUN, args=(child.to_dict(), child_input), immutable=True)
        for child, child_input in outcome.branches
    ]
    if len(header) == 1:
        return chain(header[0], app.signature(MERGE, args=(node, outcome.input, True)))
    return chord(header, app.signature(MERGE, args=(node, outcome.input)))

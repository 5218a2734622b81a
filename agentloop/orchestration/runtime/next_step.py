"""What a task does next, as the :class:`~agentloop.orchestration.runtime.engine.WorkflowEngine` decides it.

An :data:`Outcome` is a value (:class:`Done`: the node ran here), a pipeline's
stages to chain (:class:`ChainStages`), a composite's branches to fan out
(:class:`FanOut`), or a :class:`~agentloop.orchestration.wire.BranchFailure` travelling
to the composite that collects it. The Celery adapter compiles each into a
return value or a canvas (``celery_adapter/canvas.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentloop.orchestration.wire import BranchFailure, WorkflowNode


@dataclass(frozen=True, kw_only=True, slots=True)
class Done:
    """The node's work is done here: ``value`` is its output."""

    value: Any


@dataclass(frozen=True, kw_only=True, slots=True)
class ChainStages:
    """Run the pipeline ``node``'s ``stages`` stages in order, then close it."""

    node: WorkflowNode
    input: Any
    stages: int
    #: ``build_stage_input`` is overridden, so each stage may read the pipeline's own input.
    carries_input: bool
    #: The indexes of the stages the rule lets share an ``agentloop.stages`` task with the stages
    #: beside them (loops and action stages: ``orchestration/packing/rule.py``).
    joinable: frozenset[int] = frozenset()
    #: The pipeline's ``pack_size`` (``None``: the deployment's): the most stages one task runs.
    pack_size: int | None = None

    @property
    def carried(self) -> Any:
        """The pipeline's own input as each stage is given it: ``None`` unless its stages read it."""
        return self.input if self.carries_input else None


@dataclass(frozen=True, kw_only=True, slots=True)
class FanOut:
    """Run the composite ``node``'s branches, then merge their outputs.

    ``max_concurrency`` (the composite's; ``None``: no bound) is how many branches may run at once;
    ``pack_size`` (the composite's; ``None``: the deployment's) how many one task runs together.
    """

    node: WorkflowNode
    input: Any
    branches: Sequence[tuple[WorkflowNode, Any]]
    max_concurrency: int | None = None
    pack_size: int | None = None
    #: The indexes of the branches that expand into a canvas of their own (a pipeline or a
    #: composite): never packed.
    expanding: frozenset[int] = frozenset()
    #: The indexes of the stage branches the packing rule keeps in a task of their own (an
    #: action whose ``run`` is not a coroutine: ``orchestration/packing/rule.py``); packed only
    #: when a pack size was set.
    solo: frozenset[int] = frozenset()


#: What a task does next.
Outcome = Done | ChainStages | FanOut | BranchFailure


@dataclass(frozen=True, kw_only=True, slots=True)
class StagesLeft:
    """An ``agentloop.stages`` task ran its time (``packing/rule.py``): the pipeline ``node``'s
    ``count`` stages from ``index`` on are left, fed ``previous`` (and the pipeline's ``input``
    when its stages read it). ``expanded``: the outcome of the stage before them when it expanded
    into a canvas (a stage class that changed under a running chain), which runs first.
    ``pipeline``: the pipeline's own shape when the task that expanded it ran its first stages
    itself: then the stages left are the rest of the pipeline, its close included, and no chain
    after the task holds them."""

    node: WorkflowNode
    previous: Any
    index: int
    count: int
    input: Any = None
    expanded: Outcome | None = None
    pipeline: ChainStages | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class LeavesPack:
    """A packed branch that waits for a person's answer: it leaves its pack, which ends with its
    other branches, and goes on alone in a task of its own (``node`` run on ``input``), which
    records its question and resumes from its checkpoint once answered."""

    node: WorkflowNode
    input: Any

"""The packing rule: what the framework packs when nobody set a pack size (``docs/how-to/packing.md``).

A branch of a composite is packed (several to one ``agentloop.pack`` task, on one event loop)
when everything below holds; otherwise it gets a task of its own, as before packing existed.

1. **The branch** is a loop or an action stage (a pipeline or a composite expands into a canvas
   of its own). Its *work* (a loop's ``advance_state``, a
   :func:`~agentloop.pipelines.action_stage.step`'s function) may be a coroutine or a plain
   function: in a pack the engine awaits a coroutine on the pack's event loop and runs a plain
   function in one of the pack's threads (``threads.py``, :func:`plain_work`), so neither stalls
   the other branches. An action stage's action's ``run`` must be a coroutine (every
   ``BaseAgentAction``'s is). The other hooks (``create_initial_state``, ``is_complete``,
   ``build_result``...) are bookkeeping between the awaits and run on the loop; one that blocks
   is caught by the lag watch (``lag.py``).
2. **The pool** runs an asyncio loop per task: ``prefork``, ``threads`` or ``solo`` (not
   ``gevent`` or ``eventlet``, whose tasks are already cheap green threads).
3. **No time limit the user set** is enforced per task: on ``prefork`` a task's limit would
   cover its whole pack, so a deployment that set ``AGENTLOOP_TASK_SOFT_TIME_LIMIT`` or
   ``AGENTLOOP_TASK_TIME_LIMIT`` keeps one task per branch (``threads`` and ``solo`` enforce no
   limit at all: runs are bounded by ``deadline_seconds`` there).
4. **Every worker can run a pack**: this process's wire version is at least
   :data:`~agentloop.orchestration.wire.PACK_WIRE_VERSION` (packs travel in the holding queue of
   that version, which only workers that read it consume: ``celery_adapter/canvas.py``).

Sizes: :func:`auto_pack_size`. A pack size set by the user (the composite's ``pack_size``,
``AGENTLOOP_PACK_SIZE``) overrides the rule: ``1`` turns packing off, ``K`` packs every loop
branch ``K`` to a task. This module reads classes and settings only: no Celery.

**Pipelines** (``docs/how-to/packing.md#pipelines``): consecutive stages of a pipeline run one
after another in one ``agentloop.stages`` task, each recorded as it ends, when the stage is a loop
or an action stage (:func:`why_not_joined`; plain-function hooks included: stages run one at a
time, so there is no sibling to block) and points 2 to 4 hold; such a task hands the stages left
on to a task of their own once it has run for :data:`JOINED_STAGES_SECONDS`. The pipeline's
``pack_size``, else ``AGENTLOOP_PACK_SIZE``, caps the stages one task runs (``1``: one task each).
The task that expands a pipeline runs the first such run of stages itself, where there is one
(``pack_policy.leading_stages``): a pipeline of cheap stages is one task.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentloop.loops.base import BaseAgentLoop
from agentloop.orchestration.wire import PACK_WIRE_VERSION
from agentloop.pipelines.action_stage import BaseActionStage, FunctionStage

__all__ = [
    "AUTO_PACKS",
    "AUTO_PACK_SIZE",
    "AUTO_PACK_SIZE_MAX",
    "JOINED_STAGES_SECONDS",
    "PACKING_POOLS",
    "DeploymentPacking",
    "auto_pack_size",
    "deployment_packing",
    "plain_work",
    "why_not_joined",
    "why_not_packed",
]

#: The branches the rule puts in one pack: 1,000 model-bound branches make five packs,
#: spread over the workers' processes (``bench.packing``: 200 to a task, 1.2-1.5x the ideal).
AUTO_PACK_SIZE = 200
#: The most packs the rule makes of one fan-out: a wider one gets bigger packs (up to
#: :data:`AUTO_PACK_SIZE_MAX`). Each pack is a task slot and an event loop on a thread of its
#: own; past twenty, more packs add threads that contend for their process's GIL, messages and
#: store calls, and spread over no more processes than twenty do. 10,000 model-bound branches on
#: two threads workers (``bench.packing --runs 10000``, same run): 50 packs of 200 4.39x the
#: ideal, 20 of 500 3.85x, 10 of 1,000 3.63x.
AUTO_PACKS = 20
#: The largest pack the rule makes (past ``AUTO_PACKS x AUTO_PACK_SIZE_MAX`` branches, packs of
#: this size): a redelivered pack's branches, one pack's result message and the branches that
#: share one event loop stay bounded.
AUTO_PACK_SIZE_MAX = 1000
#: The pools whose tasks each run an asyncio event loop, where a pack runs.
PACKING_POOLS = frozenset({"prefork", "threads", "solo"})
#: How long one ``agentloop.stages`` task runs a pipeline's stages before it sends the rest on in
#: a task of their own: cheap stages share a task, a slow one (a model call) soon gets its own;
#: a task time limit covers about this plus one stage, and a worker slot is given back this often.
JOINED_STAGES_SECONDS = 1.0


def _is_coroutine(function: Callable[..., Any] | None) -> bool:
    return function is not None and inspect.iscoroutinefunction(function)


def why_not_packed(runnable: Any) -> str | None:
    """Why the rule keeps a branch of ``runnable`` (a class) in a task of its own, or ``None``
    when it may be packed (point 1 of the module doc)."""
    if not isinstance(runnable, type):
        return "it is not a runnable class"
    if issubclass(runnable, BaseAgentLoop):
        return None
    if issubclass(runnable, BaseActionStage):
        action = getattr(runnable, "action", None)
        if not _is_coroutine(getattr(action, "run", None)):
            return f"the action of {runnable.__name__} runs as a plain function"
        return None
    return "it expands into tasks of its own (a pipeline or a composite)"


def plain_work(runnable: Any) -> str | None:
    """The work of a branch of ``runnable`` that is a plain function, named (``"X.advance_state"``,
    ``"the step X"``): in a pack it runs in the pack's threads (``threads.py``); ``None`` when its
    work is a coroutine, awaited on the pack's event loop."""
    if not isinstance(runnable, type):
        return None
    if issubclass(runnable, BaseAgentLoop) and not _is_coroutine(getattr(runnable, "advance_state", None)):
        return f"{runnable.__name__}.advance_state"
    if issubclass(runnable, FunctionStage) and not _is_coroutine(getattr(runnable, "function", None)):
        return f"the step {runnable.__name__}"
    return None


@dataclass(frozen=True, slots=True)
class DeploymentPacking:
    """Whether this process packs by default (points 2 to 4 of the module doc), and why not."""

    allowed: bool
    reason: str = ""


def deployment_packing(*, pool: str | None, wire_version: int, time_limits_set: bool) -> DeploymentPacking:
    """Points 2 to 4 of the rule for this process: its pool (``None``: not known, as in a
    process that is no worker), its wire version, and whether the user set a task time limit."""
    if wire_version < PACK_WIRE_VERSION:
        return DeploymentPacking(False, f"wire version {wire_version} predates packs ({PACK_WIRE_VERSION})")
    if pool is not None and pool not in PACKING_POOLS:
        return DeploymentPacking(False, f"the {pool} pool runs no event loop per task")
    if time_limits_set and pool in (None, "prefork"):
        return DeploymentPacking(False, "a task time limit was set: a pack's would cover all its branches")
    return DeploymentPacking(True)


def auto_pack_size(width: int, bound: int | None) -> int:
    """The rule's pack size for ``width`` packable branches run at most ``bound`` at once
    (``None``: no bound): packs of at most :data:`AUTO_PACK_SIZE`, as even as the width allows
    (1,001 branches make six packs of 167, not five of 200 and one of 1); a fan-out wider than
    :data:`AUTO_PACKS` such packs makes that many, bigger ones (10,000 branches: 20 packs of
    500), of at most :data:`AUTO_PACK_SIZE_MAX`. Under a bound below the width, packs of the
    bound (up to :data:`AUTO_PACK_SIZE`): one lane of them keeps ``bound`` branches running at
    once, as many as one task per branch would."""
    if bound is not None and bound < width:
        return max(1, min(AUTO_PACK_SIZE, bound))
    packs = max(1, -(-width // AUTO_PACK_SIZE))
    if packs > AUTO_PACKS:
        packs = max(AUTO_PACKS, -(-width // AUTO_PACK_SIZE_MAX))
    return max(1, -(-width // packs))


def why_not_joined(runnable: Any) -> str | None:
    """Why the rule keeps a pipeline stage of ``runnable`` (a class) in a task of its own, or
    ``None`` when it may run in one ``agentloop.stages`` task with the stages beside it (see the
    module doc): any loop or action stage, whatever its hooks are."""
    if not isinstance(runnable, type):
        return "it is not a runnable class"
    if issubclass(runnable, BaseAgentLoop | BaseActionStage):
        return None
    return "it is neither a loop nor an action stage (a pipeline or a composite expands into tasks)"

"""Where a worker applies the packing rule (``orchestration/packing/rule.py``): its pool, its
settings, and the queue packs travel in.

* :func:`install_pool_name` records the worker's pool (``prefork``, ``threads``, ``solo``,
  ``gevent``...) on the app when the worker boots (a bootstep: a prefork child inherits it), so
  the process that fans a composite out knows it.
* :func:`pack_plan` is the pack size a composite's branches get, and which of them the rule
  keeps in a task of their own.
* :func:`stage_plan` is the most stages of a pipeline one ``agentloop.stages`` task runs.
* :class:`PackRouter` (first of the app's ``task_routes``) sends every ``agentloop.pack`` (and
  ``agentloop.batch_pack``, ``agentloop.pack_collect``, ``agentloop.stages``) to the
  holding queue of :data:`~agentloop.orchestration.wire.PACK_WIRE_VERSION`, declared as the wire
  gate declares it: a worker of a release before packs (which consumes only its own queue, or
  the holding queues of lower versions) never takes one; every worker that runs packs consumes
  it (``wire_versions.WireGate``). Routed by name, in whichever process sends the pack (a chord's
  header, a lane's next step), so no queue travels in a message.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, bootsteps

from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.celery_adapter.wire_versions import app_wire_version, holding_queue_entity
from agentloop.orchestration.packing.rule import DeploymentPacking, auto_pack_size, deployment_packing
from agentloop.orchestration.runtime.next_step import ChainStages, FanOut
from agentloop.orchestration.wire import PACK_TASKS, PACK_WIRE_VERSION

__all__ = [
    "PackRouter",
    "install_packing",
    "leading_stages",
    "pack_plan",
    "pool_name",
    "stage_plan",
    "this_deployment",
]


def pool_name(pool_cls: Any) -> str | None:
    """The name of a Celery pool class (``prefork``, ``threads``, ``solo``, ``gevent``, ``eventlet``),
    read from the first of its classes that is Celery's own; ``None`` when none is."""
    for cls in getattr(pool_cls, "__mro__", ()):
        module = getattr(cls, "__module__", "")
        if module.startswith("celery.concurrency."):
            name = module.rsplit(".", 1)[-1]
            return {"thread": "threads", "asynpool": "prefork"}.get(name, name)
    return None


class PoolName(bootsteps.StartStopStep):  # type: ignore[misc]
    """A worker bootstep: the worker's pool recorded on its app (``app.agentloop_pool``)."""

    name = "agentloop.pool_name"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        app = getattr(parent, "app", None)
        if app is not None:
            app.agentloop_pool = pool_name(getattr(parent, "pool_cls", None))


class PackRouter:
    """Celery's ``task_routes``: ``agentloop.pack`` to the holding queue of
    :data:`~agentloop.orchestration.wire.PACK_WIRE_VERSION` (the module doc); ``None`` (the next
    route) for every other message."""

    def __call__(self, name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> Any:
        app = getattr(task, "app", None)
        if name not in PACK_TASKS or app is None:
            return None
        entity = getattr(app, "agentloop_pack_queue", None)
        if entity is None:
            entity = app.agentloop_pack_queue = holding_queue_entity(app, PACK_WIRE_VERSION)
        return {"queue": entity}


def install_packing(app: Celery) -> None:
    """Have ``app``'s workers record their pool, and route its packs (the module doc). Idempotent."""
    app.steps["worker"].add(PoolName)
    routes = app.conf.task_routes
    routes = [] if routes is None else list(routes) if isinstance(routes, list | tuple) else [routes]
    if not any(isinstance(route, PackRouter) for route in routes):
        app.conf.task_routes = [PackRouter(), *routes]


def this_deployment(app: Celery) -> DeploymentPacking:
    """Whether this process packs where nobody set a pack size (points 2 to 4 of the rule)."""
    settings = dependencies_of(app).settings
    return deployment_packing(
        pool=getattr(app, "agentloop_pool", None),
        wire_version=app_wire_version(app),
        time_limits_set=settings.time_limits_set,
    )


def pack_plan(app: Celery, outcome: FanOut) -> tuple[int, frozenset[int]]:
    """The pack size of the composite's branches (1: none packed) and the branches kept in a task
    of their own besides those that expand: the composite's ``pack_size``, else
    ``AGENTLOOP_PACK_SIZE``, else the rule's (``orchestration/packing/rule.py``)."""
    if app_wire_version(app) < PACK_WIRE_VERSION:
        return 1, frozenset()  # this worker says it cannot run packs: neither can it send one
    chosen = outcome.pack_size or dependencies_of(app).settings.pack_size
    if chosen is not None:
        return chosen, frozenset()
    if not this_deployment(app).allowed:
        return 1, frozenset()
    packable = len(outcome.branches) - len(outcome.expanding) - len(outcome.solo)
    return auto_pack_size(packable, outcome.max_concurrency), outcome.solo


def stage_plan(app: Celery, outcome: ChainStages) -> int:
    """The most consecutive stages of the pipeline one ``agentloop.stages`` task runs (1: a task
    per stage): the pipeline's ``pack_size``, else ``AGENTLOOP_PACK_SIZE``, else the rule's, all of
    them (``orchestration/packing/rule.py``, ``docs/how-to/packing.md#pipelines``)."""
    if app_wire_version(app) < PACK_WIRE_VERSION:
        return 1  # this worker says it cannot run agentloop.stages: neither can it send one
    chosen = outcome.pack_size or dependencies_of(app).settings.pack_size
    if chosen is not None:
        return chosen
    return outcome.stages if this_deployment(app).allowed else 1


def leading_stages(app: Celery, outcome: ChainStages) -> int:
    """How many of the pipeline's first stages the task that expanded it runs itself, as the
    ``agentloop.stages`` task it would send first would (0: none, the chain as before): its first
    run of joinable stages, where :func:`stage_plan` joins stages at all."""
    plan = stage_plan(app, outcome)
    if plan <= 1:
        return 0
    count = 0
    while count < min(plan, outcome.stages) and count in outcome.joinable:
        count += 1
    return count

"""What the ``model_bound`` benchmark's worker runs (imported through ``AGENTLOOP_IMPORTS``).

* ``bench.model.loop``: a loop of :data:`CALLS` iterations, each one model-shaped wait:
  ``asyncio.sleep(LATENCY)``, or, when ``OPENAI_BASE_URL`` is set, one call through the
  context's :class:`~agentloop.orchestration.llm.openai.processor.OpenAIProcessor` (the local
  OpenAI-protocol server adds the latency);
* ``bench.model.plain_loop``: the same with a plain ``def advance_state`` that blocks its thread
  (``time.sleep``): ``python -m bench.packing_profile --runnable bench.model.plain_loop`` measures
  what running plain-function work in a pack's threads costs;
* ``bench.model.fan``: a composite of ``input`` such loops, all at once (``max_concurrency = None``:
  the default bound of 8 would run them in 8 lanes on Celery), packed by the packing rule since
  it sets no pack size; ``bench.model.fan_packed_<K>`` the same with its branches packed ``K``
  to a task (:data:`PACK_SIZES`; ``K = 1``: one task per branch);
* the bare tasks, registered on the deployed app in the worker only: ``bench.model.sleep``
  (the same :data:`CALLS` waits or calls on its thread's event loop, as a framework task
  makes them) and ``bench.model.body`` (counts its header's results).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from agentloop import BaseAgentLoop, BaseCompositeAgent, Branch, register
from agentloop.orchestration.runtime.context import standard_context

LOOP = "bench.model.loop"
PLAIN_LOOP = "bench.model.plain_loop"
FAN = "bench.model.fan"
SLEEP = "bench.model.sleep"
BODY = "bench.model.body"
CALLS = 3
LATENCY = 0.2


async def _one_call(context: Any) -> None:
    processor = getattr(context, "processor", None)
    if processor is None or type(processor).__name__ != "OpenAIProcessor":
        await asyncio.sleep(LATENCY)
        return
    from agentloop.actions.model import ModelRequest

    response = await ModelRequest(instruction="ping").send(processor)
    if response.error is not None:
        raise RuntimeError(f"model call failed: {response!r}")


@register(LOOP, context_factory=standard_context)
class ModelLoop(BaseAgentLoop):
    """:data:`CALLS` iterations of one model-shaped wait each; its result is :data:`CALLS`."""

    max_iterations = CALLS + 1

    def create_initial_state(self, *, input: Any) -> dict[str, int]:
        return {"n": 0}

    async def advance_state(self, *, state: dict[str, int], iteration: int) -> dict[str, int]:
        await _one_call(self.context)
        return {"n": state["n"] + 1}

    def is_complete(self, *, state: dict[str, int], iteration: int) -> bool:
        return state["n"] >= CALLS

    def build_result(self, *, state: dict[str, int]) -> int:
        return state["n"]


@register(PLAIN_LOOP)
class PlainModelLoop(ModelLoop):
    """:class:`ModelLoop` with a plain ``def advance_state`` whose wait blocks its thread
    (``time.sleep``): in a pack it runs in the pack's threads (``packing/threads.py``)."""

    def advance_state(self, *, state: dict[str, int], iteration: int) -> dict[str, int]:  # type: ignore[override]
        time.sleep(LATENCY)
        return {"n": state["n"] + 1}


@register(FAN)
class ModelFan(BaseCompositeAgent):
    """``input`` model-bound loops side by side; the result is how many succeeded."""

    branch_runnables = (ModelLoop,)
    max_concurrency = None  # fan out fully: on Celery a bound runs the branches in lanes

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=ModelLoop, input=None, key=str(i)) for i in range(int(input))]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return sum(1 for result in results if result.ok and result.output == CALLS)


#: The pack sizes the packed fans are registered with: ``bench.model.fan_packed_<K>``.
PACK_SIZES = (1, 10, 50, 100, 200, 500, 1000)


def packed_fan(size: int) -> str:
    """The name of :class:`ModelFan` with its branches packed ``size`` to a task."""
    return f"bench.model.fan_packed_{size}"


@register(packed_fan(1))
class ModelFanPacked1(ModelFan):
    """One task per branch, whatever the packing rule would do."""

    pack_size = 1


@register(packed_fan(10))
class ModelFanPacked10(ModelFan):
    pack_size = 10


@register(packed_fan(50))
class ModelFanPacked50(ModelFan):
    pack_size = 50


@register(packed_fan(100))
class ModelFanPacked100(ModelFan):
    pack_size = 100


@register(packed_fan(200))
class ModelFanPacked200(ModelFan):
    pack_size = 200


@register(packed_fan(500))
class ModelFanPacked500(ModelFan):
    pack_size = 500


@register(packed_fan(1000))
class ModelFanPacked1000(ModelFan):
    pack_size = 1000


def _sleep(*args: Any, **kwargs: Any) -> int:
    """A bare task: :data:`CALLS` model-shaped waits on this thread's event loop (the same call
    as the framework's loop: a sleep, or a request through an ``OpenAIProcessor``)."""
    from types import SimpleNamespace

    from agentloop.orchestration.celery_adapter.tasks import run_coroutine
    from agentloop.orchestration.runtime.context import process_context_factory

    async def calls() -> int:
        context = SimpleNamespace(processor=process_context_factory().provider.processor())
        for _ in range(CALLS):
            await _one_call(context)
        return CALLS

    return run_coroutine(calls())


def _body(results: Any, *args: Any, **kwargs: Any) -> int:
    return sum(1 for result in results if result == CALLS)


_deployed_app: Any = None
if "worker" in sys.argv[1:] or os.environ.get("AGENTLOOP_BENCH_WORKER") == "1":
    from agentloop.celery import app as _deployed_app

    _deployed_app.task(name=SLEEP, shared=False)(_sleep)
    _deployed_app.task(name=BODY, shared=False)(_body)


def _tune_store_pool(size: int | None, pre_ping: bool) -> None:
    """Experiment: the worker's store engine with a pool of ``size`` (+ ``size`` overflow), and
    without the ping each connection's checkout sends first when ``pre_ping`` is false."""
    import functools

    import agentloop.orchestration.store.open as store_open
    from agentloop.orchestration.store.database import create_engine_for

    options: dict[str, Any] = {} if pre_ping else {"pool_pre_ping": False}
    if size is not None:
        options.update(pool_size=size, max_overflow=size)
    tuned = functools.partial(create_engine_for, **options)
    setattr(store_open, "create_engine_for", tuned)  # noqa: B010 (an experiment's patch)


_POOL_SIZE, _NO_PING = (
    os.environ.get("AGENTLOOP_BENCH_POOL_SIZE"),
    os.environ.get("AGENTLOOP_BENCH_NO_PRE_PING"),
)
if (_POOL_SIZE or _NO_PING) and _deployed_app is not None:
    _tune_store_pool(int(_POOL_SIZE) if _POOL_SIZE else None, pre_ping=not _NO_PING)


def _unshare_kombu_client() -> None:
    """Ablation: once the worker is ready, kombu's Redis channels build a client per command
    again (undoes the worker patch ``kombu-redis-shared-client``), to measure what it saves."""
    from celery import signals

    def undo(**_kwargs: Any) -> None:
        from kombu.transport.redis import Channel

        unpatched = getattr(Channel.conn_or_acquire, "__wrapped__", Channel.conn_or_acquire)
        Channel.conn_or_acquire = unpatched  # type: ignore[method-assign]

    signals.worker_ready.connect(undo, weak=False)


if os.environ.get("AGENTLOOP_BENCH_CLIENT_PER_CALL") and _deployed_app is not None:
    _unshare_kombu_client()


if os.environ.get("AGENTLOOP_BENCH_THREAD_PROFILE") and _deployed_app is not None:
    from bench.model_bound.profile import install

    install(os.environ["AGENTLOOP_BENCH_THREAD_PROFILE"])


if os.environ.get("AGENTLOOP_BENCH_TASK_CPU") and _deployed_app is not None:
    from bench.model_bound.profile import install_task_cpu

    install_task_cpu(os.environ["AGENTLOOP_BENCH_TASK_CPU"])


if os.environ.get("AGENTLOOP_BENCH_CPU_WRAP") and _deployed_app is not None:
    from bench.model_bound.profile import install_cpu_wraps

    install_cpu_wraps(os.environ["AGENTLOOP_BENCH_CPU_WRAP"])


if os.environ.get("AGENTLOOP_BENCH_CELERY_CONF") and _deployed_app is not None:
    import json

    # Experiment: Celery settings of the worker's app overridden, e.g. '{"task_track_started": false}'.
    _deployed_app.conf.update(json.loads(os.environ["AGENTLOOP_BENCH_CELERY_CONF"]))


if os.environ.get("AGENTLOOP_BENCH_SWITCH_INTERVAL") and _deployed_app is not None:
    # Experiment: how long a thread of the worker holds the GIL before another may take it (5 ms by default).
    sys.setswitchinterval(float(os.environ["AGENTLOOP_BENCH_SWITCH_INTERVAL"]))

"""What ``bench.fairness``'s worker runs: ``bench.fair.call``, one model call per run, keyed by its
input's ``key`` with a per-key limit of ``AGENTLOOP_BENCH_KEY_LIMIT`` (default 50) runs in flight;
``bench.fair.free``, the same call with no concurrency rule (``--defaults``: nothing set)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from agentloop import BaseAgentLoop, Concurrency, register
from agentloop.actions.model import ModelRequest
from agentloop.orchestration.runtime.context import standard_context

RUNNABLE = "bench.fair.call"
FREE = "bench.fair.free"
LIMIT = int(os.environ.get("AGENTLOOP_BENCH_KEY_LIMIT", "50"))


def key_of(input: Any, context: Any) -> str | None:
    return input.get("key") if isinstance(input, dict) else None


@register(RUNNABLE, context_factory=standard_context, concurrency=Concurrency(limit=LIMIT, key=key_of))
class FairCall(BaseAgentLoop):
    """One model call saying its key (the model server counts each key's calls in flight)."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> dict[str, Any]:
        return {"key": input["key"], "done": False}

    async def advance_state(self, *, state: dict[str, Any], iteration: int) -> dict[str, Any]:
        response = await ModelRequest(instruction=f"key={state['key']}").send(self.context.processor)
        if response.error is not None:
            raise RuntimeError(f"model call failed: {response.error}")
        return {**state, "done": True}

    def is_complete(self, *, state: dict[str, Any], iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: dict[str, Any]) -> str:
        return str(state["key"])


@register(FREE, context_factory=standard_context)
class FreeCall(FairCall):
    """:class:`FairCall` without a concurrency rule: no key, no limit, no fair shares (the batch is
    packed where the packing rule allows, as any runnable that sets nothing)."""


#: ``--trace``: where each task's time went in the worker, one JSON line per step to this file
#: (``received``: the worker's main process took the message; ``start`` and ``end``: the pool
#: process ran it), appended with ``O_APPEND`` from every process of the worker.
TRACE = os.environ.get("AGENTLOOP_BENCH_TRACE")


def _trace(step: str, task_id: Any, name: Any, **more: Any) -> None:
    entry = {"step": step, "id": task_id, "name": name, "at": time.time(), "pid": os.getpid(), **more}
    line = json.dumps(entry)
    descriptor = os.open(str(TRACE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (line + "\n").encode())
    finally:
        os.close(descriptor)


def _received(request: Any = None, **_: Any) -> None:
    _trace("received", request.id, request.name)


def _start(task_id: Any = None, task: Any = None, **_: Any) -> None:
    _trace("start", task_id, task.name)


def _end(task_id: Any = None, task: Any = None, **_: Any) -> None:
    _trace("end", task_id, task.name)


if TRACE:
    from celery import signals

    signals.task_received.connect(_received, weak=False)
    signals.task_prerun.connect(_start, weak=False)
    signals.task_postrun.connect(_end, weak=False)

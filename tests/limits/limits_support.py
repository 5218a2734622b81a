"""Helpers of the rate-limit and budget tests (imported by their conftest and tests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentloop.orchestration.store import RunStore
from agentloop.orchestration.testing.servers.openai_server import (
    Reply,
    default_reply,
    reply_delay,
    reply_tool_call,
)
from tests.services.worker import WorkerProcess


@dataclass(frozen=True)
class ModelCall:
    """One chat-completions request the server answered: when it arrived, its stamp, its usage."""

    arrived: float  # time.time() at arrival
    body: dict[str, Any]
    stamp: dict[str, Any] | None
    usage: tuple[int, int]  # (prompt_tokens, completion_tokens) the server reported


@dataclass
class RecordingModel:
    """The responder of the test server: answers the forced tool with a known usage, after ``delay``."""

    delay: float = 0.0
    usage: Callable[[int], tuple[int, int]] = lambda index: (60, 40)
    calls: list[ModelCall] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self, *, delay: float = 0.0, usage: Callable[[int], tuple[int, int]] | None = None) -> None:
        with self.lock:
            self.calls.clear()
            self.delay = delay
            self.usage = usage or (lambda index: (60, 40))

    def snapshot(self) -> list[ModelCall]:
        with self.lock:
            return sorted(self.calls, key=lambda call: call.arrived)

    def __call__(self, body: dict[str, Any]) -> Reply:
        from workflows.limits import read_stamp

        arrived = time.time()
        forced = default_reply(body)
        name = forced.tool_calls[0].name if getattr(forced, "tool_calls", ()) else "answer"
        with self.lock:
            usage = self.usage(len(self.calls))
            self.calls.append(ModelCall(arrived=arrived, body=body, stamp=read_stamp(body), usage=usage))
            delay = self.delay
        reply = reply_tool_call(name, {}, usage=usage)
        return reply_delay(delay, reply) if delay > 0 else reply


@dataclass
class TwoWorkers:
    app: Any
    store: RunStore
    redis_url: str
    workers: tuple[WorkerProcess, WorkerProcess]

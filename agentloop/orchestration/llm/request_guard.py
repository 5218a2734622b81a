"""The switch that keeps tests from reaching a real model: :data:`model_requests`.

The agentloop pytest plugin (:mod:`agentloop.orchestration.testing.plugin`) blocks real
model requests while tests run; the processors that talk to a provider
(:class:`~agentloop.orchestration.llm.openai.processor.OpenAIProcessor`,
:class:`~agentloop.orchestration.llm.anthropic.processor.AnthropicProcessor`) ask
:meth:`ModelRequestGuard.check` before each request. A request to a server on
this machine (``127.0.0.1``, ``localhost``, ``::1``: the local wire-protocol
servers of tests) always goes through; any other raises
:class:`ModelRequestsBlockedError`, whose message names the switches that turn
the block off. Outside the plugin nothing is blocked.

The switch is one per process on purpose, like pydantic-ai's
``ALLOW_MODEL_REQUESTS``: a processor built anywhere, in a test, in a context
factory or in a worker thread, must see it, and only the plugin sets it.

A replay blocks requests too, with :meth:`ModelRequestGuard.holding`: a hold is counted, apart
from the switch, so replays that overlap (in two threads, ending in any order) never save and
restore the switch, and once the last hold is let go the guard is exactly as it was.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from agentloop.orchestration.errors import ModelRequestsBlockedError
from agentloop.orchestration.redaction import redact_url

__all__ = [
    "LOCAL_HOSTS",
    "GuardState",
    "ModelRequestGuard",
    "is_local_url",
    "model_requests",
]

#: Host names that always mean this machine.
LOCAL_HOSTS = frozenset({"localhost", "localhost.localdomain"})


def is_local_url(url: str) -> bool:
    """Whether ``url`` points at this machine (a loopback address or ``localhost``)."""
    host = (urlsplit(url).hostname or "").lower()
    if host in LOCAL_HOSTS or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardState:
    """What the switch says: ``hint`` (how to allow requests) while blocked, ``None`` while allowed."""

    hint: str | None = None


class ModelRequestGuard:
    """Whether this process may send model requests off this machine (see the module doc).

    Every refusal is also remembered until :meth:`take_refusals`, so the
    plugin can fail a test whose code swallowed the error (an action turns a
    raising processor into its fallback).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = GuardState()
        self._holds: dict[object, str] = {}
        self._refusals: list[str] = []

    @property
    def blocked(self) -> bool:
        """Whether requests off this machine are refused (by the switch or a hold)."""
        return self._hint() is not None

    def _hint(self) -> str | None:
        with self._lock:
            if self._state.hint is not None:
                return self._state.hint
            return next(reversed(self._holds.values()), None)

    @contextmanager
    def holding(self, *, hint: str) -> Iterator[None]:
        """Requests off this machine refused inside the block (``hint`` ends the error), whatever
        the switch says; holds are counted, so overlapping ones end in any order (module doc)."""
        hold = object()
        with self._lock:
            self._holds[hold] = hint
        try:
            yield
        finally:
            with self._lock:
                del self._holds[hold]

    @property
    def state(self) -> GuardState:
        """The switch's position, to :meth:`restore` later."""
        with self._lock:
            return self._state

    def restore(self, state: GuardState) -> None:
        """Put the switch back where :attr:`state` said it was."""
        with self._lock:
            self._state = state

    def block(self, *, hint: str) -> None:
        """Refuse requests off this machine; ``hint`` says how to allow them (it ends the error)."""
        self.restore(GuardState(hint=hint))

    def allow(self) -> None:
        """Let every request through."""
        self.restore(GuardState())

    @contextmanager
    def allowing(self) -> Iterator[None]:
        """Requests allowed inside the ``with`` block, the switch restored after it."""
        previous = self.state
        self.allow()
        try:
            yield
        finally:
            self.restore(previous)

    def check(self, *, url: str, sender: str) -> None:
        """Raise :class:`ModelRequestsBlockedError` if ``sender`` may not send to ``url`` now."""
        hint = self._hint()
        if hint is None or is_local_url(url):
            return
        message = (
            f"real model requests are blocked in tests: {sender} would send a request to "
            f"{redact_url(url)}. {hint}"
        )
        with self._lock:
            self._refusals.append(message)
        raise ModelRequestsBlockedError(message)

    def take_refusals(self) -> tuple[str, ...]:
        """The refusals since the last call, forgotten as they are returned."""
        with self._lock:
            refusals, self._refusals = tuple(self._refusals), []
        return refusals


#: The process's switch (see the module doc).
model_requests = ModelRequestGuard()

"""Step caching, opt-in: an action's result kept under a key, for a time, and reused.

An action opts in with :attr:`~actions.BaseAgentAction.cache_ttl` (seconds or a
``timedelta``; ``None``, the default, is never cached). Its
:meth:`~actions.BaseAgentAction.cache_key` names the result: by default a hash of
the action's name, its arguments as canonical JSON and
:attr:`~actions.BaseAgentAction.cache_version`; a forced tool call
(:class:`~actions.ForcedToolAction`, so a typed one too) adds a hash of the tool
payload it loads (a schema change is a new key) and of the model inputs its
context carries (history, documents, files). A key of ``None`` skips the cache
for that call.

Every ``run`` of an action goes through :func:`cached_run` (``BaseAgentAction``
wraps it), which reads the :class:`StepCache` of the enclosing
:func:`use_step_cache` block: the run scope (``loops/scope.py``) installs its
``cache`` there. In-process the runner holds an :class:`InMemoryStepCache`; on
Celery the workers share one in Redis (``orchestration/runtime/step_cache.py``). Without a
cache, or for an action without a ``cache_ttl``, ``run`` runs as it is.

What is stored: the value as JSON (pydantic models and dataclasses dumped as a
step output is) and the tokens its computation used, measured by a meter nested
in the run's (:mod:`agentloop.actions.usage`). A value that is not JSON is not cached
(logged). A failure is never cached: an exception, and a step that reported a
model failure (:func:`~agentloop.actions.report_model_failure`: every fallback does),
which :func:`~agentloop.actions.degradation.watch_step` tells.
A cache that fails (Redis away) is a miss, logged, never a failed step.

Each cached call reports a ``cache_hit`` or ``cache_miss`` step event
(:mod:`agentloop.actions.step_events`; ``data``: ``action``, ``key`` (its first 12
characters), and ``tokens_saved`` on a hit) and counts itself on the run's meter
(:func:`~agentloop.actions.usage.report_cache_use`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.context_binding import Binding
from agentloop.actions.degradation import watch_step
from agentloop.actions.recording import record_entry
from agentloop.actions.schema import json_output
from agentloop.actions.step_events import report_step_event
from agentloop.actions.usage import Usage, UsageMeter, current_meter, report_cache_use, use_meter

logger = logging.getLogger(__name__)

CACHE_HIT, CACHE_MISS = "cache_hit", "cache_miss"
#: How many characters of a key events and logs show.
KEY_SHOWN = 12
_ENTRY_VERSION = 1


@runtime_checkable
class StepCache(Protocol):
    """Where cached step results live: text under a key, for ``ttl`` seconds.

    Either method may be ``def`` or ``async def``; ``get`` answers ``None`` for a
    missing or expired key. A cache that raises is treated as a miss.
    """

    def get(self, key: str) -> Awaitable[str | None] | str | None: ...

    def set(self, key: str, value: str, *, ttl: float) -> Awaitable[None] | None: ...


class InMemoryStepCache:
    """A :class:`StepCache` in this process: thread-safe, entries expire after their ttl
    (``clock``, ``time.monotonic`` by default, is injectable for tests). At most
    ``max_entries`` are kept; the oldest stored goes first."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, max_entries: int = 10_000) -> None:
        self.clock, self.max_entries = clock, max_entries
        self._entries: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= self.clock():
                del self._entries[key]
                return None
            return entry[1]

    def set(self, key: str, value: str, *, ttl: float) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (self.clock() + ttl, value)
            while len(self._entries) > self.max_entries:
                del self._entries[next(iter(self._entries))]

    def __len__(self) -> int:
        with self._lock:
            now = self.clock()
            return sum(1 for expires, _ in self._entries.values() if expires > now)


_cache: ContextVar[StepCache | None] = ContextVar("agentloop_step_cache", default=None)


def use_step_cache(cache: StepCache | None) -> Binding[StepCache | None]:
    """Steps inside the block keep and find their cached results in ``cache`` (``None``: no caching)."""
    return Binding(_cache, cache)


def canonical_json(value: Any) -> str:
    """``value`` as JSON text with sorted keys and no spaces (``TypeError``/``ValueError`` when it
    is not JSON): equal values, equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def step_cache_key(*parts: Any) -> str | None:
    """The SHA-256 (hex) of ``parts`` as canonical JSON; ``None`` (not cached) when they are not JSON."""
    try:
        text = canonical_json(list(parts))
    except (TypeError, ValueError) as error:
        logger.info("step not cached: its key parts are not JSON (%s)", error)
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def schema_version(payload: Any) -> str:
    """A tool payload's version for a cache key: the hash of its canonical JSON (``"none"`` when missing)."""
    return "none" if payload is None else (step_cache_key(payload) or "unhashable")


def ttl_seconds(ttl: timedelta | float | None) -> float | None:
    """An action's ``cache_ttl`` in seconds; ``None`` when it is not cached (unset, zero or negative)."""
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
    return None if seconds is None or seconds <= 0 else float(seconds)


class _StepMeter:
    """A meter nested in the run's: counts the tokens of one step, forwards everything."""

    def __init__(self, parent: UsageMeter | None) -> None:
        self.parent, self.tokens = parent, 0

    def check(self) -> None:
        if self.parent is not None:
            self.parent.check()

    def record(self, usage: Usage) -> None:
        self.tokens += usage.total_tokens
        if self.parent is not None:
            self.parent.record(usage)

    def record_cache(self, *, hit: bool, tokens_saved: int = 0) -> None:
        with use_meter(self.parent):
            report_cache_use(hit=hit, tokens_saved=tokens_saved)


async def _cache_call(action: str, work: Callable[[], Any]) -> Any:
    try:
        return await maybe_await(work())
    except Exception:
        logger.warning("step cache failed for %s: treated as a miss", action, exc_info=True)
        return None


def _entry(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, str | bytes):
        return None
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("v") != _ENTRY_VERSION or "value" not in entry:
        return None
    return entry


RunMethod = Callable[..., Awaitable[Any]]


async def _report(action: str, phase: str, key: str, **data: Any) -> None:
    report_cache_use(hit=phase == CACHE_HIT, tokens_saved=int(data.get("tokens_saved", 0)))
    shown = key[:KEY_SHOWN]
    what = "hit" if phase == CACHE_HIT else "miss"
    message = f"cache {what} for {action} ({shown})"
    await report_step_event(
        action=action, phase=phase, message=message, data={"action": action, "key": shown, **data}
    )


async def cached_run(action: Any, run: RunMethod, *, arguments: dict[str, Any], context: Any) -> Any:
    """``run(action, arguments=..., context=...)``, its result taken from or kept in the step cache
    when ``action`` opts in (see the module doc)."""
    cache, ttl = _cache.get(), ttl_seconds(getattr(action, "cache_ttl", None))
    if cache is None or ttl is None:
        return await run(action, arguments=arguments, context=context)
    name = str(action.name or type(action).__name__)
    try:
        key = await maybe_await(action.cache_key(arguments=arguments, context=context))
    except Exception:  # a key that cannot be made: the step runs uncached
        logger.warning("step %s not cached: its cache_key raised", name, exc_info=True)
        key = None
    if not isinstance(key, str) or not key:
        return await run(action, arguments=arguments, context=context)
    entry = _entry(await _cache_call(name, lambda: cache.get(key)))
    if entry is not None:
        tokens = int(entry.get("tokens", 0))
        await record_entry(CACHE_HIT, {"action": name, "key": key, "entry": canonical_json(entry)})
        await _report(name, CACHE_HIT, key, tokens_saved=tokens)
        value = entry["value"]
        return await maybe_await(action.cache_decode(value)) if entry.get("model") else value
    await _report(name, CACHE_MISS, key)
    meter = _StepMeter(current_meter())
    with watch_step() as watch, use_meter(meter):
        value = await run(action, arguments=arguments, context=context)
    if watch.reason:
        logger.info("step %s not cached: %s", name, watch.reason)
        return value
    data = json_output(value)
    try:
        text = canonical_json(
            {"v": _ENTRY_VERSION, "value": data, "tokens": meter.tokens, "model": data is not value}
        )
    except (TypeError, ValueError) as error:
        logger.info("step %s not cached: its value is not JSON (%s)", name, error)
        return value
    await _cache_call(name, lambda: cache.set(key, text, ttl=ttl))
    return value


def caching(run: RunMethod) -> RunMethod:
    """``run`` (an action's own ``run``) going through :func:`cached_run` when it is the action's
    outermost ``run``: a subclass's ``super().run(...)`` is never cached twice."""
    if getattr(run, "__agentloop_caching__", False) or not inspect.iscoroutinefunction(run):
        return run  # a ``def run`` breaks the contract; ``check_action`` says so

    @functools.wraps(run)
    async def wrapper(self: Any, *, arguments: dict[str, Any], context: Any) -> Any:
        if getattr(self, "cache_ttl", None) is None or type(self).run is not wrapper:
            return await run(self, arguments=arguments, context=context)
        return await cached_run(self, run, arguments=arguments, context=context)

    wrapper.__agentloop_caching__ = True  # type: ignore[attr-defined]
    return wrapper

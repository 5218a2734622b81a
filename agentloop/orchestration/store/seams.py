"""The seams the core's run scope plugs into, backed by a run store: progress publishing,
cancellation, checkpoints and token usage shared by every task of a run."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, TypeVar
from weakref import WeakKeyDictionary

from agentloop.actions.errors import TokenBudgetExceededError
from agentloop.actions.usage import Usage
from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.loops.run_outcome import DEGRADED, MODEL_UNAVAILABLE
from agentloop.orchestration.interruptions import INTERRUPTIONS, reraise_interruption
from agentloop.orchestration.metrics import record as metrics
from agentloop.orchestration.redaction import scrub, scrub_values
from agentloop.orchestration.store.pack_writes import PackWrites
from agentloop.orchestration.store.protocol import RunStore

logger = logging.getLogger(__name__)

T = TypeVar("T")


#: How many runs' answers a per-store cache below keeps before it starts afresh.
MAX_KEPT_RUNS = 10_000


def _answers_of(cache: WeakKeyDictionary[RunStore, dict[str, T]], store: RunStore) -> dict[str, T]:
    """The per-run answers ``cache`` keeps for ``store`` (the caller holds the cache's lock); past
    :data:`MAX_KEPT_RUNS` runs they are forgotten, and asked again."""
    answers = cache.setdefault(store, {})
    if len(answers) > MAX_KEPT_RUNS:
        answers.clear()
    return answers


class StoreCancelSignal:
    """Cancellation requested through the run store.

    The store is asked at most every ``interval`` seconds per run and process:
    the many tasks of one run that a worker process runs share one answer. One
    thread asks; the others that check meanwhile keep the answer they had (a
    composite's hundreds of branches starting at once in a threads worker ask
    once, not each). Answers are kept per store object, so two stores in one
    process (two apps, or a test's) never answer for each other's runs.

    Given an ``offload`` (a pack's threads), an answer that has gone stale is asked again in a
    thread while the old one stands (a cancel is seen one round trip later): on a pack's event
    loop the read held every branch of the pack, for up to 0.9 s under load. A run's first
    answer is always asked at once.
    """

    _seen: ClassVar[WeakKeyDictionary[RunStore, dict[str, tuple[float, bool]]]] = WeakKeyDictionary()
    _seen_lock = threading.Lock()

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        *,
        interval: float = 0.5,
        offload: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
    ) -> None:
        self.store, self.run_id, self.interval, self.offload = store, run_id, interval, offload

    @classmethod
    def remember(cls, store: RunStore, run_id: str, cancelled: bool) -> None:
        """Take ``cancelled`` as root run ``run_id``'s flag, read just now with its record (a
        packed batch's claim), for ``interval`` seconds as an answer asked of the store."""
        with cls._seen_lock:
            _answers_of(cls._seen, store)[run_id] = (time.monotonic(), cancelled)

    def is_cancelled(self) -> bool:
        now = time.monotonic()
        # A fresh answer is read without the lock (a dict read is atomic): the many branches of a
        # pack check before each iteration, and only the one that asks the store needs the lock.
        answers = self._seen.get(self.store)
        checked_at, cancelled = (-1e9, False) if answers is None else answers.get(self.run_id, (-1e9, False))
        if cancelled or now - checked_at < self.interval:
            return cancelled
        with self._seen_lock:
            seen = _answers_of(self._seen, self.store)
            checked_at, cancelled = seen.get(self.run_id, (-1e9, False))
            if cancelled or now - checked_at < self.interval:
                return cancelled
            known = checked_at > -1e9
            seen[self.run_id] = (now, False)  # this thread asks: the others answer meanwhile
        if known and self.offload is not None and _running_loop() is not None:
            self.offload(functools.partial(self._ask, seen, now))  # the old answer (no) stands meanwhile
            return False
        return self._ask(seen, now)

    def _ask(self, seen: dict[str, tuple[float, bool]], now: float) -> bool:
        """Ask the store for the flag (here, or in a thread: ``offload``) and keep its answer."""
        try:
            cancelled = self.store.is_cancel_requested(self.run_id)
        except Exception as error:
            reraise_interruption(error)  # the soft time limit stops the task, here too
            logger.warning("could not read the cancel flag of run %s", self.run_id, exc_info=True)
            return False
        with self._seen_lock:
            seen[self.run_id] = (now, cancelled)
        return cancelled


class StoreUsageMeter:
    """Token usage of a whole run, summed in the run store by every task on every worker (and its
    step-cache hits, misses and tokens saved).

    The run's ``token_budget`` (if any) is shared: the step whose call passes it
    ends with :class:`~actions.TokenBudgetExceededError`, and no step starts a
    model call once it is spent; so a budgeted run is read before each call and
    each call's usage written at once, for totals every worker agrees on. A run
    without a budget (most) costs no read per call and no write per call: its
    usage is summed here and written at most every ``interval`` seconds
    (:meth:`flush`), with each checkpoint (:class:`StoreCheckpointer`, a pack's
    ``PackWrites``: a process killed after a checkpoint has stored the usage of
    every call before it) and at the task's end, with the loop's result (:meth:`take`).
    Whether a run has a budget is read once per run and process (a budget never
    changes after the launch), at the first model call: steps that call no model
    cost nothing.
    """

    _budgets: ClassVar[WeakKeyDictionary[RunStore, dict[str, int | None]]] = WeakKeyDictionary()
    _budgets_lock = threading.Lock()

    def __init__(self, store: RunStore, run_id: str, *, interval: float = 0.0) -> None:
        self.store, self.run_id, self.interval = store, run_id, interval
        self.budget: int | None = None
        self.used = 0
        self._known = False  # whether ``budget`` is the run's
        self._pending = Usage()  # summed, not written yet (a run without a budget)
        self._written_at = time.monotonic()
        self._lock = threading.Lock()

    def _read(self) -> None:
        record = self.store.get_run(self.run_id)
        if record is not None:
            self.budget = record.token_budget
            self.used = record.input_tokens + record.output_tokens
        self._known = True
        with self._budgets_lock:
            _answers_of(self._budgets, self.store)[self.run_id] = self.budget

    def _budget_known(self) -> bool:
        if not self._known:
            with self._budgets_lock:
                budgets = _answers_of(self._budgets, self.store)
                if self.run_id in budgets:
                    self.budget, self._known = budgets[self.run_id], True
        return self._known

    def check(self) -> None:
        if not self._budget_known() or self.budget is not None:
            self._read()
        if self.budget is not None and self.used >= self.budget:
            raise TokenBudgetExceededError(used=self.used, budget=self.budget)

    def record(self, usage: Usage) -> None:
        if usage.total_tokens == 0:
            return
        if not self._budget_known():
            self._read()
        if self.budget is None:
            with self._lock:
                self._pending = self._pending + usage
            if time.monotonic() - self._written_at >= self.interval:
                self.flush()
            return
        total_in, total_out = self.store.add_usage(self.run_id, usage.input_tokens, usage.output_tokens)
        self.used = total_in + total_out
        if self.used > self.budget:
            raise TokenBudgetExceededError(used=self.used, budget=self.budget)

    def take(self) -> Usage:
        """The usage summed since the last write, for the caller to write (with the task's end)."""
        with self._lock:
            pending, self._pending = self._pending, Usage()
            self._written_at = time.monotonic()
        return pending

    def keep(self, usage: Usage) -> None:
        """Usage :meth:`take` gave that could not be written: written with the next write."""
        if usage.total_tokens:
            with self._lock:
                self._pending = usage + self._pending

    def flush(self, *, after_failure: bool = False) -> None:
        """Write the usage summed since the last write (the task ends, or ``interval`` passed).

        ``after_failure``: the task's loop failed; a store error here is logged, never raised over
        the loop's own error (which fails the run, or retries the task when it is the store's).
        """
        pending = self.take()
        if pending.total_tokens == 0:
            return
        try:
            self.used = sum(self.store.add_usage(self.run_id, pending.input_tokens, pending.output_tokens))
        except Exception as error:
            self.keep(pending)  # this task's next write writes it
            reraise_interruption(error)
            if not after_failure:
                raise
            logger.warning("could not record the token usage of run %s", self.run_id, exc_info=True)

    def record_tool_call(self) -> None:
        """Count one MCP tool call on the run (``orchestration/mcp/tools.py``), written at once."""
        self.store.add_tool_calls(self.run_id)

    def record_cache(self, *, hit: bool, tokens_saved: int = 0) -> None:
        """Count one step-cache hit (with the tokens it saved) or miss on the run (``actions/caching.py``)."""
        saved = tokens_saved if hit else 0
        self.store.add_cache_usage(self.run_id, hits=int(hit), misses=int(not hit), tokens_saved=saved)
        metrics.cache_looked_up(hit=hit, tokens_saved=saved)


class StoreCheckpointer:
    """Per-iteration checkpoints of the loops of one run, in the run store.

    A loop's state is saved after a finished iteration (before the next one
    starts, see :class:`~agentloop.loops.scope.Checkpointer`) when ``interval``
    seconds have passed since its last save (0: after every iteration). LLM
    iterations take longer than that, so each is saved; a fast loop is not
    slowed by a write per iteration, and a redelivery repeats at most
    ``interval`` seconds of its work. A loop that finishes records its result
    instead (:meth:`RunStore.finish_loop`).
    """

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        *,
        interval: float = 0.0,
        loaded: dict[str, tuple[int, Any] | None] | None = None,
        writes: PackWrites | None = None,
        before_save: Callable[[], None] | None = None,
        meter: StoreUsageMeter | None = None,
    ) -> None:
        self.store, self.run_id, self.interval = store, run_id, interval
        self._saved_at: dict[str, float] = {}
        self._loaded = dict(loaded or {})
        self.writes = writes  # a pack's loops write their checkpoints together (pack_writes.py)
        # the task's buffered events, written before a checkpoint: a process killed after it has
        # stored every event up to that checkpoint, and a resumption emits those after it again
        self.before_save = before_save
        # the loop's usage not written yet, written with the checkpoint (one transaction): a
        # process killed after a checkpoint has counted every model call before it (a pack's
        # meter goes with its ``writes``)
        self.meter = meter

    def load(self, *, path: str) -> tuple[int, Any] | None:
        self._saved_at[path] = time.monotonic()
        if path in self._loaded:  # read already, with the rest of the loop's record
            return self._loaded.pop(path)
        return self.store.loop_record(self.run_id, path).checkpoint

    def save(self, *, path: str, iteration: int, state: Any) -> Awaitable[None] | None:
        now = time.monotonic()
        if self.interval > 0 and now - self._saved_at.get(path, -1e9) < self.interval:
            return None
        if self.writes is not None:
            return self._save_with_the_pack(path, iteration, state, now)
        if self.before_save is not None:
            self.before_save()
        used = self.meter.take() if self.meter is not None else Usage()
        if used.total_tokens == 0:
            self.store.save_checkpoint(self.run_id, path, iteration, state)
        else:
            try:
                self.store.save_checkpoints(
                    self.run_id,
                    [(path, iteration, state)],
                    input_tokens=used.input_tokens,
                    output_tokens=used.output_tokens,
                )
            except BaseException:
                assert self.meter is not None
                self.meter.keep(used)  # the task's next write, or its end, writes it
                raise
        self._saved_at[path] = now
        return None

    def save_now(self, *, path: str, iteration: int, state: Any) -> Awaitable[None] | None:
        """:meth:`save`, whatever ``interval``: for a step whose result must never be done again
        (a pydantic-ai agent's model request or tool call, ``integrations/pydantic_ai``)."""
        self._saved_at.pop(path, None)
        interval, self.interval = self.interval, 0.0
        try:
            return self.save(path=path, iteration=iteration, state=state)
        finally:
            self.interval = interval

    async def _save_with_the_pack(self, path: str, iteration: int, state: Any, now: float) -> None:
        assert self.writes is not None
        await self.writes.checkpoint(path, iteration, state)
        self._saved_at[path] = now


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _ends_the_root(payload: dict[str, Any]) -> bool:
    """Whether an event is the run root's own end (``completed`` at path ``""``; not the run's
    ``degraded`` event, which :meth:`WorkflowEngine.finish` emits after it)."""
    return (
        payload.get("path") == ""
        and payload.get("status") == ProgressStatus.COMPLETED.value
        and payload.get("phase") != DEGRADED
    )


class ProgressPublisher:
    """The ``on_progress`` of a task: every event goes to the run store under the root run
    id; the latest becomes the task's ``PROGRESS`` state and a ``task-progress`` event.

    Events are buffered and written together, at most ``interval`` seconds after
    the first of them (a timer on the running event loop, or the next event),
    and at the end of the task (:meth:`flush` with ``final``, which publishes no
    ``PROGRESS`` state: the task's own end follows). The state has its own pace,
    ``state_interval`` (default: ``interval``): the latest event is published at
    most that long after the first one not shown yet, so a task shows its
    progress more often than it writes events, or less. A step that takes
    seconds shows its progress within ``state_interval``; a fast task costs one
    write and no state. A failing write is logged and dropped: progress never
    fails a run. A degraded run's root ends with a ``progress`` event, not ``completed``: whether
    the store holds a model failure of the run is read then, unless the caller said
    (``stored_failures``: a packed batch's run that had not started when its pack claimed it holds
    no events). The task's soft time limit is never dropped (``orchestration/interruptions.py``):
    raised during a write, it goes on up (raised into a timer's write, it is raised by the next
    event), and the events are kept for the task's end.

    A pack sets :attr:`state_offload` (its threads): the state is then published from a thread,
    one publication at a time (the latest event waits for the one in flight), while the loop runs
    the pack's branches; :meth:`settle` waits for the last before the task's own end. On the
    loop, a publication's round trips to the result backend and the broker, behind the other
    threads' under load, held every branch of the pack (the lag watch saw 0.8-1.6 s in
    ``EventDispatcher.send`` with 10,000 loops in flight).
    """

    def __init__(
        self,
        *,
        store: RunStore,
        run_id: str,
        update_state: Callable[[dict[str, Any]], None] | None = None,
        interval: float = 0.2,
        state_interval: float | None = None,
        secrets: Sequence[str] = (),
        failure_secrets: Callable[[], Sequence[str]] | None = None,
        stored_failures: bool | None = None,
    ) -> None:
        self.store, self.run_id, self.update_state, self.interval = store, run_id, update_state, interval
        self.stored_failures = stored_failures
        self.state_interval = interval if state_interval is None else state_interval
        self.secrets = tuple(secrets)  # texts never written: the node's context spec, as errors quote it
        self.failure_secrets = failure_secrets  # and in a failure's message: the task's hidden arguments
        self._pending: list[dict[str, Any]] = []
        self._first_pending_at = 0.0
        self._unshown: dict[str, Any] | None = None  # the latest event not published as the state yet
        self._first_unshown_at = 0.0
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._interrupted: BaseException | None = None  # the soft time limit, raised into a timer
        #: Where a pack publishes the state, off its event loop (``None``: on the caller's thread).
        self.state_offload: Callable[[Callable[[], None]], Awaitable[None]] | None = None
        #: A pack's writer of its due events (``PackWrites.events_due``: in turn with its other
        #: writes, off its loop); ``None``: written on the caller's thread when due.
        self.events_writer: Callable[[], None] | None = None
        self._showing: asyncio.Future[None] | None = None  # the publication in a thread

    def __call__(self, event: ProgressEvent) -> None:
        if self._interrupted is not None:
            interrupted, self._interrupted = self._interrupted, None
            raise interrupted
        now = time.monotonic()
        payload = event.to_dict()
        if self.secrets:  # any event: a step's message or data may echo what its context holds
            payload["message"] = scrub(payload["message"], self.secrets)
            if payload.get("data"):
                payload["data"] = scrub_values(payload["data"], self.secrets)
        if self.failure_secrets is not None and payload.get("status") == "failed":
            payload["message"] = scrub(payload["message"], self.failure_secrets())
        if payload.get("phase") == MODEL_UNAVAILABLE and self.stored_failures is not None:
            self.stored_failures = True  # what this task emits, the store holds by its end
        if _ends_the_root(payload) and self._run_degraded():
            # one terminal event per run: a degraded run's is the ``degraded`` event after this
            payload["status"] = ProgressStatus.PROGRESS.value
        if not self._pending:
            self._first_pending_at = now
            self._arm("events", self.interval, self._write_due)
        self._pending.append(payload)
        if self.update_state is not None:
            if self._unshown is None:
                self._first_unshown_at = now
                self._arm("state", self.state_interval, self._show)
            self._unshown = payload
        if now - self._first_pending_at >= self.interval:
            self._write_due()
        if self._unshown is not None and now - self._first_unshown_at >= self.state_interval:
            self._show()

    def _run_degraded(self) -> bool:
        """Whether a model call of the run failed (a ``model_unavailable`` event, this task's or
        stored); a store that cannot say is taken as no."""
        if any(event.get("phase") == MODEL_UNAVAILABLE for event in self._pending):
            return True
        if self.stored_failures is not None:
            return self.stored_failures
        try:
            return bool(self.store.events(self.run_id, phase=MODEL_UNAVAILABLE))
        except Exception:
            logger.warning("could not read run %s's model failures", self.run_id, exc_info=True)
            return False

    def _arm(self, name: str, delay: float, then: Callable[[], None]) -> None:
        loop = _running_loop()
        if loop is None:
            return  # no event loop: the next event or the final flush writes it
        if name not in self._timers:
            self._timers[name] = loop.call_later(delay, self._on_timer, name, then)

    def _on_timer(self, name: str, then: Callable[[], None]) -> None:
        self._timers.pop(name, None)
        try:
            then()
        except INTERRUPTIONS as error:  # asyncio would log it and go on: the task's next event raises it
            self._interrupted = error

    def _disarm(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def take(self) -> list[dict[str, Any]]:
        """The events not written yet (the caller writes them, with the task's end: no state
        follows); they leave the buffer."""
        self._disarm("state")
        self._unshown = None
        return self.take_events()

    def take_events(self) -> list[dict[str, Any]]:
        """The events not written yet, for the caller to write (with a pack's checkpoints,
        ``pack_writes.py``); the state is published as before."""
        self._disarm("events")
        pending, self._pending = self._pending, []
        return pending

    def give_back(self, events: list[dict[str, Any]]) -> None:
        """Events :meth:`take_events` gave that could not be written: first in the next write."""
        if events:
            if not self._pending:
                self._first_pending_at = time.monotonic()
                self._arm("events", self.interval, self._write_due)
            self._pending = events + self._pending

    def _write_due(self) -> None:
        """The buffered events are due: written now, or handed to :attr:`events_writer`."""
        if self.events_writer is None or _running_loop() is None:
            self._write()
            return
        self._disarm("events")
        self._first_pending_at = time.monotonic()  # asked once; the writer takes them in turn
        self.events_writer()

    def _write(self) -> None:
        pending = self.take_events()
        if not pending:
            return
        try:
            self.store.append_events(self.run_id, pending)
        except Exception as error:
            if isinstance(error, INTERRUPTIONS):  # the soft time limit: the task stops, its end writes them
                self._pending = pending + self._pending
                raise
            logger.warning(
                "could not record %d progress event(s) of run %s", len(pending), self.run_id, exc_info=True
            )

    def _show(self) -> None:
        self._disarm("state")
        if self._unshown is None or self.update_state is None:
            self._unshown = None
            return
        if self.state_offload is not None and _running_loop() is not None:
            if self._showing is not None and not self._showing.done():  # one at a time: wait for it
                self._first_unshown_at = time.monotonic()
                self._arm("state", self.state_interval, self._show)
                return
            latest, self._unshown = self._unshown, None
            self._showing = asyncio.ensure_future(self.state_offload(lambda: self._publish(latest)))
            return
        latest, self._unshown = self._unshown, None
        try:
            self.update_state(latest)
        except Exception as error:
            reraise_interruption(error)
            logger.warning("could not publish progress of run %s", self.run_id, exc_info=True)

    def _publish(self, latest: dict[str, Any]) -> None:
        """Publish ``latest`` as the state from a thread (:attr:`state_offload`): a failure is
        logged, as on the loop."""
        assert self.update_state is not None
        try:
            self.update_state(latest)
        except Exception:
            logger.warning("could not publish progress of run %s", self.run_id, exc_info=True)

    async def settle(self) -> None:
        """Wait for the state publication in a thread (:attr:`state_offload`), if any, to end: the
        task's own end must come after it."""
        if self._showing is not None:
            await asyncio.wait([self._showing])

    def flush(self, *, final: bool = False) -> None:
        """Write the buffered events now, and publish the latest as the state (not when ``final``:
        the task's own end follows)."""
        self._write()
        if final:
            self.take()
        else:
            self._show()

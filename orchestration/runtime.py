"""What a worker process shares between tasks: the run store, and the seams the
core's run scope plugs into (progress publishing, cancellation, checkpoints).

The run store comes from ``DATABASE_URL`` (a SQLite file by default) and is
opened once per process; tests and embedders may install another with
:func:`set_run_store`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from actions.model import Usage
from actions.usage import TokenBudgetExceededError
from loops.progress import ProgressEvent, ProgressStatus
from orchestration.store import RunStore, open_store

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_store: RunStore | None = None


def get_run_store() -> RunStore:
    """The process's run store, opened (and migrated) on first use."""
    global _store
    with _lock:
        if _store is None:
            _store, _ = open_store()
        return _store


def set_run_store(store: RunStore | None) -> RunStore | None:
    """Install ``store`` for this process (``None``: reopen from the environment next time);
    returns the store installed before."""
    global _store
    with _lock:
        previous, _store = _store, store
        return previous


class StoreCancelToken:
    """Cancellation requested through the run store; asks it at most every ``interval`` seconds."""

    def __init__(self, store: RunStore, run_id: str, *, interval: float = 0.5) -> None:
        self.store, self.run_id, self.interval = store, run_id, interval
        self._checked_at = -1e9
        self._cancelled = False

    def is_cancelled(self) -> bool:
        now = time.monotonic()
        if not self._cancelled and now - self._checked_at >= self.interval:
            self._checked_at = now
            try:
                self._cancelled = self.store.is_cancel_requested(self.run_id)
            except Exception:
                logger.warning("could not read the cancel flag of run %s", self.run_id, exc_info=True)
        return self._cancelled


class StoreUsageMeter:
    """Token usage of a whole run, summed in the run store by every task on every worker.

    The run's ``token_budget`` (if any) is shared: the step whose call passes it
    ends with :class:`~actions.TokenBudgetExceededError`, and no step starts a
    model call once it is spent.
    """

    def __init__(self, store: RunStore, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        record = store.get_run(run_id)
        self.budget = record.token_budget if record is not None else None
        self.used = record.input_tokens + record.output_tokens if record is not None else 0

    def _over(self) -> bool:
        return self.budget is not None and self.used >= self.budget

    def check(self) -> None:
        if self.budget is not None:
            record = self.store.get_run(self.run_id)
            if record is not None:
                self.used = record.input_tokens + record.output_tokens
            if self._over():
                raise TokenBudgetExceededError(used=self.used, budget=self.budget)

    def record(self, usage: Usage) -> None:
        if usage.total_tokens == 0:
            return
        total_in, total_out = self.store.add_usage(self.run_id, usage.input_tokens, usage.output_tokens)
        self.used = total_in + total_out
        if self.budget is not None and self.used > self.budget:
            raise TokenBudgetExceededError(used=self.used, budget=self.budget)


class StoreCheckpointer:
    """Per-iteration checkpoints of the loops of one run, in the run store."""

    def __init__(self, store: RunStore, run_id: str) -> None:
        self.store, self.run_id = store, run_id

    def load(self, *, path: str) -> tuple[int, Any] | None:
        return self.store.load_checkpoint(self.run_id, path)

    def save(self, *, path: str, iteration: int, state: Any) -> None:
        self.store.save_checkpoint(self.run_id, path, iteration, state)


class ProgressPublisher:
    """The ``on_progress`` of a task: every event goes to the run store under the root run
    id; the latest becomes the task's ``PROGRESS`` state and a ``task-progress`` event.

    Writes are batched and throttled (``interval``) for fast loops; ``started``,
    ``completed`` and ``failed`` events flush at once. A failing write is logged
    and dropped: progress never fails a run.
    """

    def __init__(
        self,
        *,
        store: RunStore,
        run_id: str,
        update_state: Callable[[dict[str, Any]], None] | None = None,
        interval: float = 0.2,
    ) -> None:
        self.store, self.run_id, self.update_state, self.interval = store, run_id, update_state, interval
        self._pending: list[dict[str, Any]] = []
        self._flushed_at = time.monotonic()

    def __call__(self, event: ProgressEvent) -> None:
        self._pending.append(event.to_dict())
        urgent = event.status is not ProgressStatus.PROGRESS
        if urgent or time.monotonic() - self._flushed_at >= self.interval:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        self._flushed_at = time.monotonic()
        try:
            for event in pending:
                self.store.append_event(self.run_id, event)
        except Exception:
            logger.warning(
                "could not record %d progress event(s) of run %s", len(pending), self.run_id, exc_info=True
            )
        if self.update_state is not None:
            try:
                self.update_state(pending[-1])
            except Exception:
                logger.warning("could not publish progress of run %s", self.run_id, exc_info=True)

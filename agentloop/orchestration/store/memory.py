"""``InMemoryRunStore``: the run store's in-process twin, for tests and offline runs.

It keeps the same promises as :class:`~agentloop.orchestration.store.SqlRunStore`
(same validation, same errors, values read back as JSON would return them)
behind one lock, so it is safe across threads but not shared between
processes.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agentloop.orchestration.errors import RunExistsError, RunNotFoundError
from agentloop.orchestration.store.base import Ended, Finish, Refused, RunStoreBase
from agentloop.orchestration.store.checks import (
    check_count,
    event_columns,
    event_payloads,
    loop_row,
)
from agentloop.orchestration.store.concurrency import InMemoryConcurrencySlots
from agentloop.orchestration.store.json_values import JsonValue
from agentloop.orchestration.store.protocol import (
    CHILD_SUMS,
    OPEN_STATUSES,
    TERMINAL_STATUSES,
    LoopRecord,
    RunOwner,
    RunRecord,
    RunStatus,
    StartedLoop,
)
from agentloop.orchestration.store.recordings import InMemoryRecordingStore
from agentloop.orchestration.store.tables import utcnow
from agentloop.orchestration.store.unless_open import root_run_values


@dataclass(kw_only=True, slots=True)
class _Checkpoint:
    iteration: int | None = None
    state: JsonValue = None
    finished: bool = False
    result: JsonValue = None
    deliveries: int = 0


def _copied(record: RunRecord) -> RunRecord:
    return replace(
        record,
        input=copy.deepcopy(record.input),
        output=copy.deepcopy(record.output),
        error=copy.deepcopy(record.error),
    )


class InMemoryRunStore(RunStoreBase):
    """A dict-backed :class:`~agentloop.orchestration.store.RunStore` (thread-safe, one process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, RunRecord] = {}
        self._owners: dict[str, RunOwner] = {}
        self._events: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self._event_ids = itertools.count(1)
        self._checkpoints: dict[tuple[str, str], _Checkpoint] = {}
        #: The entries of recorded runs.
        self.recordings = InMemoryRecordingStore()
        #: The slots of concurrency keys.
        self.concurrency = InMemoryConcurrencySlots(self)

    def _insert_run(self, values: dict[str, Any], owner: RunOwner | None) -> RunRecord:
        record = RunRecord(**values)
        with self._lock:
            stored = self._runs.get(record.id)
            if stored is not None:
                raise RunExistsError(_copied(stored))
            self._runs[record.id] = record
            if owner is not None:
                self._owners[record.id] = owner
            return _copied(record)

    def create_run_unless_open(
        self, *, run_id: str, runnable: str, input: JsonValue, celery_task_id: str | None = None
    ) -> RunRecord:
        """Record pending run ``run_id`` unless a run of ``runnable`` is open; see the protocol."""
        values = root_run_values(run_id, runnable, input, celery_task_id)
        with self._lock:
            open_runs = [r for r in self._runs.values() if r.runnable == runnable and not r.is_finished]
            if run_id not in self._runs and not open_runs:
                self._runs[run_id] = RunRecord(**values)
            chosen = self._runs.get(run_id) or min(open_runs, key=lambda r: r.created_at)
            return _copied(chosen)

    def run_owner(self, run_id: str) -> RunOwner | None:
        """The owner the run was created with (``None``: anyone may end it)."""
        with self._lock:
            self._get(run_id)
            return self._owners.get(run_id)

    def _get(self, run_id: str) -> RunRecord:
        record = self._runs.get(run_id)
        if record is None:
            raise RunNotFoundError(run_id)
        return record

    def _mark_running(self, run_id: str) -> tuple[bool, str | None]:
        with self._lock:
            record = self._get(run_id)
            if record.status in TERMINAL_STATUSES:
                return False, None
            started_at = record.started_at or utcnow()
            self._runs[run_id] = replace(record, status=RunStatus.RUNNING.value, started_at=started_at)
        return True, record.runnable if record.started_at is None else None  # counted at its first start

    def mark_waiting(self, run_id: str) -> bool:
        """Mark a running run ``waiting`` for a person's answer; ``False`` when it was not running."""
        with self._lock:
            record = self._get(run_id)
            if record.status != RunStatus.RUNNING.value:
                return False
            self._runs[run_id] = replace(record, status=RunStatus.WAITING.value)
            return True

    def _finish_run(self, asked: Finish) -> Ended | Refused:
        run_id, owner_token, ended = asked.run_id, asked.owner_token, asked.ended
        with self._lock:
            record, owner = self._runs.get(run_id), self._owners.get(run_id)
            if record is None or record.is_finished or (owner is not None and not owner.holds(owner_token)):
                return Refused(record, owner)
            final, stored_output, stored_error = asked.outcome
            self._runs[run_id] = replace(
                record,
                status=final,
                output=stored_output,
                error=stored_error,
                finished_at=ended,
                stopped_by=asked.stopped_by,
            )
        return Ended(record.runnable, record.started_at or record.created_at)

    def count_open_runs(self) -> dict[tuple[str, str], int]:
        """Runs not ended (pending, running, waiting), by ``(runnable, status)``."""
        with self._lock:
            keys = [(r.runnable, r.status) for r in self._runs.values() if r.status in OPEN_STATUSES]
        return dict(Counter(keys))

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run, or ``None``."""
        with self._lock:
            record = self._runs.get(run_id)
            return None if record is None else _copied(record)

    def list_runs(
        self,
        *,
        limit: int = 50,
        status: str | None = None,
        runnable: str | None = None,
        parent_run_id: str | None = None,
        principal: str | None = None,
        offset: int = 0,
    ) -> list[RunRecord]:
        """The most recently created runs first, optionally filtered, after skipping ``offset``."""
        check_count(limit, "limit")
        check_count(offset, "offset")
        with self._lock:
            records = [
                r
                for r in self._runs.values()
                if (status is None or r.status == status)
                and (runnable is None or r.runnable == runnable)
                and (parent_run_id is None or r.parent_run_id == parent_run_id)
                and (principal is None or r.principal == principal)
            ]
        records.sort(key=lambda record: (record.created_at, record.id), reverse=True)
        return [_copied(record) for record in records[offset : offset + limit]]

    def summarize_children(self, parent_run_id: str) -> dict[str, Any]:
        """Counts per status, and summed token and step-cache use, of the runs whose parent is
        ``parent_run_id``."""
        by_status: dict[str, int] = {}
        totals = dict.fromkeys(CHILD_SUMS, 0)
        with self._lock:
            for record in self._runs.values():
                if record.parent_run_id == parent_run_id:
                    by_status[record.status] = by_status.get(record.status, 0) + 1
                    for name in CHILD_SUMS:
                        totals[name] += getattr(record, name)
        return {"total": sum(by_status.values()), "by_status": by_status, **totals}

    def append_events(self, root_run_id: str, events: Sequence[Mapping[str, Any]]) -> None:
        """Store progress events under ``root_run_id``, in order (a path's second ``failed`` event is
        left out)."""
        payloads = event_payloads(root_run_id, events)
        with self._lock:
            self._append_events(root_run_id, payloads)

    def _append_events(self, root_run_id: str, payloads: list[dict[str, Any]]) -> None:
        """Keep ``payloads``, a path's second ``failed`` event left out (the caller holds the lock)."""
        if any(payload.get("status") == "failed" for payload in payloads):
            payloads = self._first_failures(root_run_id, payloads)
        self._keep_events(root_run_id, payloads)

    def _first_failures(self, root_run_id: str, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``payloads`` without a ``failed`` event for a path that has one (the caller holds the lock)."""
        stored = self._events.get(root_run_id, [])
        failed = {event.get("path") for _, event in stored if event.get("status") == "failed"}
        kept = []
        for payload in payloads:
            if payload.get("status") == "failed":
                if payload.get("path") in failed:
                    continue
                failed.add(payload.get("path"))
            kept.append(payload)
        return kept

    def _keep_events(self, root_run_id: str, payloads: list[dict[str, Any]]) -> None:
        stored = self._events.setdefault(root_run_id, [])
        stored.extend((next(self._event_ids), payload) for payload in payloads)

    def events(
        self,
        run_id: str,
        *,
        after_id: int = 0,
        limit: int | None = None,
        phase: str | Sequence[str] | None = None,
        status: str | None = None,
    ) -> list[tuple[int, dict[str, Any]]]:
        """The events of root run ``run_id`` with an id above ``after_id``, oldest first (only
        those of ``phase``, or of any of several, and ``status`` when given)."""
        if limit is not None:
            check_count(limit, "limit")
        phases = None if phase is None else {phase} if isinstance(phase, str) else set(phase)
        with self._lock:
            selected = [
                (i, copy.deepcopy(e))
                for i, e in self._events.get(run_id, [])
                if i > after_id
                and (phases is None or event_columns(e)["phase"] in phases)
                and (status is None or event_columns(e)["status"] == status)
            ]
        return selected if limit is None else selected[:limit]

    def prune_workflows(
        self, *, before: datetime, dry_run: bool = False
    ) -> tuple[list[str], set[str], tuple[int, int, int]]:
        """Delete (or count) the workflows ``orchestration/store/retention.py`` may prune: their root
        run ids (the oldest first), the ids of all their runs, and the runs, events and
        checkpoints that went. Use :func:`~agentloop.orchestration.store.retention.prune_runs`."""
        with self._lock:
            open_ids = {r.id for r in self._runs.values() if r.status not in TERMINAL_STATUSES}
            open_roots = {self._runs[i].root_run_id for i in open_ids}
            roots = sorted(
                (
                    r
                    for r in self._runs.values()
                    if r.id == r.root_run_id
                    and r.status in TERMINAL_STATUSES
                    and r.finished_at is not None
                    and r.finished_at < before
                    and r.id not in open_roots
                    and r.parent_run_id not in open_ids
                ),
                key=lambda r: (r.finished_at or before, r.id),
            )
            root_ids = [r.id for r in roots]
            chosen = set(root_ids)
            members = {r.id for r in self._runs.values() if r.root_run_id in chosen}
            events = sum(len(self._events.get(root, ())) for root in root_ids)
            loops = [key for key in self._checkpoints if key[0] in members]
            if not dry_run:
                for run_id in members:
                    del self._runs[run_id]
                    self._owners.pop(run_id, None)
                for root in root_ids:
                    self._events.pop(root, None)
                for key in loops:
                    del self._checkpoints[key]
        return root_ids, members, (len(members), events, len(loops))

    def _run_and_root(self, run_id: str) -> list[str]:
        record = self._runs.get(run_id)
        if record is None:
            return []
        return [run_id] if record.root_run_id not in self._runs else [run_id, record.root_run_id]

    def request_cancel(self, run_id: str) -> None:
        """Ask the whole workflow of ``run_id`` to stop: flags the run and its root run."""
        with self._lock:
            targets = self._run_and_root(run_id)
            if not targets:
                raise RunNotFoundError(run_id)
            for target in targets:
                self._runs[target] = replace(self._runs[target], cancel_requested=True)

    def is_cancel_requested(self, run_id: str) -> bool:
        """Whether cancellation was requested for the run or its root run (``False`` if unknown)."""
        with self._lock:
            return any(self._runs[target].cancel_requested for target in self._run_and_root(run_id))

    def _add_counts(self, run_id: str, counts: dict[str, int]) -> dict[str, int]:
        """Add each of ``counts`` to the run's field of that name, under the lock; the new totals."""
        with self._lock:
            record = self._with_counts(self._get(run_id), counts)
        return {name: getattr(record, name) for name in counts}

    def _with_counts(self, record: RunRecord, counts: Mapping[str, int]) -> RunRecord:
        """Keep ``record`` with each of ``counts`` added to its field (the caller holds the lock)."""
        record = replace(record, **{name: getattr(record, name) + added for name, added in counts.items()})
        self._runs[record.id] = record
        return record

    def save_checkpoint(self, run_id: str, path: str, iteration: int, state: JsonValue) -> None:
        """Replace the loop's checkpoint with ``(iteration, state)`` (a finished loop's record stays)."""
        row = loop_row(run_id, path, checkpoint=(iteration, state))
        with self._lock:
            checkpoint = self._checkpoints.setdefault((run_id, path), _Checkpoint())
            if not checkpoint.finished:
                checkpoint.iteration, checkpoint.state = row["iteration"], row["state"]
                checkpoint.deliveries = 0

    def save_checkpoints(
        self,
        run_id: str,
        checkpoints: Sequence[tuple[str, int, JsonValue]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """:meth:`save_checkpoint` for each ``(path, iteration, state)`` with ``events`` appended
        first, at once."""
        rows = [
            loop_row(run_id, path, checkpoint=(iteration, state)) for path, iteration, state in checkpoints
        ]
        payloads = event_payloads(run_id, events)
        with self._lock:
            self._append_events(run_id, payloads)
            for row in rows:
                checkpoint = self._checkpoints.setdefault((run_id, row["path"]), _Checkpoint())
                if not checkpoint.finished:
                    checkpoint.iteration, checkpoint.state = row["iteration"], row["state"]
                checkpoint.deliveries = 0

    def loop_record(self, run_id: str, path: str) -> LoopRecord:
        """Whether the loop at ``path`` finished, its result and its latest checkpoint, in one read."""
        with self._lock:
            return self._loop_record(run_id, path)

    def loop_records(self, run_id: str, paths: Sequence[str]) -> list[LoopRecord]:
        """:meth:`loop_record` of each of ``paths``, in their order, in one read."""
        with self._lock:
            return [self._loop_record(run_id, path) for path in paths]

    def start_loops(self, run_id: str, paths: Sequence[str]) -> list[StartedLoop]:
        """Count one more delivery of each loop at ``paths`` and return its record, at once."""
        with self._lock:
            kept = {path: self._checkpoints.setdefault((run_id, path), _Checkpoint()) for path in paths}
            for checkpoint in kept.values():
                checkpoint.deliveries += 1
            return [StartedLoop(self._loop_record(run_id, path), kept[path].deliveries) for path in paths]

    def _loop_record(self, run_id: str, path: str) -> LoopRecord:
        """The loop's record (the caller holds the lock)."""
        kept = self._checkpoints.get((run_id, path))
        if kept is None:
            return LoopRecord(finished=False, result=None, checkpoint=None)
        return LoopRecord(
            finished=kept.finished,
            result=copy.deepcopy(kept.result) if kept.finished else None,
            checkpoint=None if kept.iteration is None else (kept.iteration, copy.deepcopy(kept.state)),
        )

    def finish_loop_then_start(
        self,
        run_id: str,
        path: str,
        result: JsonValue,
        next_path: str,
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> tuple[JsonValue, StartedLoop]:
        """:meth:`finish_loop`, then :meth:`start_loops` of ``next_path`` (a store in memory dies
        with its process: there is no crash between the two to guard against)."""
        tokens = {"input_tokens": input_tokens, "output_tokens": output_tokens}
        recorded = self.finish_loop(run_id, path, result, events=events, **tokens)
        (started,) = self.start_loops(run_id, [next_path])
        return recorded, started

    def finish_loop(
        self,
        run_id: str,
        path: str,
        result: JsonValue,
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> JsonValue:
        """Record the loop's result (its checkpoint is kept), append ``events`` under ``run_id``
        and add the tokens to the run's usage, at once; the first result recorded stands and is
        returned."""
        row = loop_row(run_id, path, result=result)
        check_count(input_tokens, "input_tokens")
        check_count(output_tokens, "output_tokens")
        payloads = event_payloads(run_id, events)
        with self._lock:
            self._keep_events(run_id, payloads)
            run = self._runs.get(run_id)
            if run is not None and (input_tokens or output_tokens):
                self._with_counts(run, {"input_tokens": input_tokens, "output_tokens": output_tokens})
            kept = self._checkpoints.setdefault((run_id, path), _Checkpoint())
            if not kept.finished:
                kept.finished, kept.result = True, row["result"]
            return copy.deepcopy(kept.result)

    def finish_loops(
        self,
        run_id: str,
        results: Sequence[tuple[str, JsonValue]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> list[JsonValue]:
        """:meth:`finish_loop` for each ``(path, result)``, at once; the results as recorded."""
        rows = [loop_row(run_id, path, result=result) for path, result in results]
        check_count(input_tokens, "input_tokens")
        check_count(output_tokens, "output_tokens")
        payloads = event_payloads(run_id, events)
        recorded = []
        with self._lock:
            self._keep_events(run_id, payloads)
            run = self._runs.get(run_id)
            if run is not None and (input_tokens or output_tokens):
                self._with_counts(run, {"input_tokens": input_tokens, "output_tokens": output_tokens})
            for row in rows:
                kept = self._checkpoints.setdefault((run_id, row["path"]), _Checkpoint())
                if not kept.finished:
                    kept.finished, kept.result = True, row["result"]
                recorded.append(copy.deepcopy(kept.result))
        return recorded

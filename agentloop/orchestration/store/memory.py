"""``InMemoryRunStore``: the run store's in-process twin, for tests and offline runs.

It gives the same primitives of :class:`~agentloop.orchestration.store.base.RunStoreBase` as
:class:`~agentloop.orchestration.store.SqlRunStore` (the base checks the values and counts the
metrics, so both accept and refuse the same; values are read back as JSON would return them)
behind one lock, so it is safe across threads but not shared between processes.
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
from agentloop.orchestration.store.base import (
    Ended,
    EventQuery,
    Finish,
    LoopEnds,
    Refused,
    Rows,
    RunQuery,
)
from agentloop.orchestration.store.bulk import BulkRunStoreBase, LoopEnd
from agentloop.orchestration.store.concurrency import InMemoryConcurrencySlots
from agentloop.orchestration.store.json_values import JsonValue
from agentloop.orchestration.store.protocol import (
    CHILD_SUMS,
    TERMINAL_STATUSES,
    LoopRecord,
    RunOwner,
    RunRecord,
    RunStatus,
    StartedLoop,
)
from agentloop.orchestration.store.recordings import InMemoryRecordingStore
from agentloop.orchestration.store.tables import utcnow


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


class InMemoryRunStore(BulkRunStoreBase):
    """A dict-backed :class:`~agentloop.orchestration.store.RunStore` (thread-safe, one process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, RunRecord] = {}
        self._owners: dict[str, RunOwner] = {}
        self._kept_events: dict[str, list[tuple[int, dict[str, Any]]]] = {}
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

    def _insert_unless_open(self, values: dict[str, Any]) -> RunRecord:
        run_id, runnable = values["id"], values["runnable"]
        with self._lock:
            open_runs = [r for r in self._runs.values() if r.runnable == runnable and not r.is_finished]
            if run_id not in self._runs and not open_runs:
                self._runs[run_id] = RunRecord(**values)
            chosen = self._runs.get(run_id) or min(open_runs, key=lambda r: r.created_at)
            return _copied(chosen)

    def _run_owner_and_status(self, run_id: str) -> tuple[RunOwner | None, str]:
        with self._lock:
            return self._owners.get(run_id), self._get(run_id).status

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

    def _count_runs(self, statuses: frozenset[str]) -> dict[tuple[str, str], int]:
        with self._lock:
            keys = [(r.runnable, r.status) for r in self._runs.values() if r.status in statuses]
        return dict(Counter(keys))

    def _get_run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            record = self._runs.get(run_id)
            return None if record is None else _copied(record)

    def _list_runs(self, query: RunQuery) -> list[RunRecord]:
        with self._lock:
            records = [record for record in self._runs.values() if query.matches(record)]
        records.sort(key=lambda record: (record.created_at, record.id), reverse=True)
        return [_copied(record) for record in records[query.offset : query.offset + query.limit]]

    def _child_counts(self, parent_run_id: str) -> list[tuple[str, int, list[int]]]:
        with self._lock:
            children = [record for record in self._runs.values() if record.parent_run_id == parent_run_id]
        return [(child.status, 1, [getattr(child, name) for name in CHILD_SUMS]) for child in children]

    def _append_events(self, root_run_id: str, rows: Rows) -> None:
        with self._lock:
            self._append_failing_once(root_run_id, rows)

    def _append_failing_once(self, root_run_id: str, rows: list[dict[str, Any]]) -> None:
        """Keep event ``rows``, a path's second ``failed`` event left out (the caller holds the lock)."""
        if any(row["status"] == "failed" for row in rows):
            rows = self._first_failures(root_run_id, rows)
        self._keep_events(root_run_id, rows)

    def _first_failures(self, root_run_id: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` without a ``failed`` event for a path that has one (the caller holds the lock)."""
        stored = self._kept_events.get(root_run_id, [])
        failed = {event["path"] for _, event in stored if event["status"] == "failed"}
        kept = []
        for row in rows:
            if row["status"] == "failed":
                if row["path"] in failed:
                    continue
                failed.add(row["path"])
            kept.append(row)
        return kept

    def _keep_events(self, root_run_id: str, rows: list[dict[str, Any]]) -> None:
        stored = self._kept_events.setdefault(root_run_id, [])
        stored.extend((next(self._event_ids), row) for row in rows)

    def _events(self, query: EventQuery) -> list[tuple[int, dict[str, Any]]]:
        with self._lock:
            selected = [
                (event_id, copy.deepcopy(row["payload"]))
                for event_id, row in self._kept_events.get(query.run_id, [])
                if query.matches(event_id, row)
            ]
        return selected if query.limit is None else selected[: query.limit]

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
            events = sum(len(self._kept_events.get(root, ())) for root in root_ids)
            loops = [key for key in self._checkpoints if key[0] in members]
            if not dry_run:
                for run_id in members:
                    del self._runs[run_id]
                    self._owners.pop(run_id, None)
                for root in root_ids:
                    self._kept_events.pop(root, None)
                for key in loops:
                    del self._checkpoints[key]
        return root_ids, members, (len(members), events, len(loops))

    def _run_and_root(self, run_id: str) -> list[str]:
        record = self._runs.get(run_id)
        if record is None:
            return []
        return [run_id] if record.root_run_id not in self._runs else [run_id, record.root_run_id]

    def _request_cancel(self, run_id: str) -> None:
        with self._lock:
            targets = self._run_and_root(run_id)
            if not targets:
                raise RunNotFoundError(run_id)
            for target in targets:
                self._runs[target] = replace(self._runs[target], cancel_requested=True)

    def _is_cancel_requested(self, run_id: str) -> bool:
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

    def _save_checkpoints(self, run_id: str, rows: Rows, events: Rows, tokens: dict[str, int]) -> None:
        with self._lock:
            self._append_failing_once(run_id, events)
            run = self._runs.get(run_id)
            if run is not None and any(tokens.values()):
                self._with_counts(run, tokens)
            for row in rows:
                checkpoint = self._checkpoints.setdefault((run_id, row["path"]), _Checkpoint())
                if not checkpoint.finished:
                    checkpoint.iteration, checkpoint.state = row["iteration"], row["state"]
                    checkpoint.deliveries = 0

    def _loop_records(self, run_id: str, paths: Sequence[str]) -> list[LoopRecord]:
        with self._lock:
            return [self._record_of_loop(run_id, path) for path in paths]

    def _start_loops(self, run_id: str, paths: Sequence[str]) -> list[StartedLoop]:
        with self._lock:
            kept = {path: self._checkpoints.setdefault((run_id, path), _Checkpoint()) for path in paths}
            for checkpoint in kept.values():
                checkpoint.deliveries += 1
            return [StartedLoop(self._record_of_loop(run_id, path), kept[path].deliveries) for path in paths]

    def _record_of_loop(self, run_id: str, path: str) -> LoopRecord:
        """The loop's record (the caller holds the lock)."""
        kept = self._checkpoints.get((run_id, path))
        if kept is None:
            return LoopRecord(finished=False, result=None, checkpoint=None)
        return LoopRecord(
            finished=kept.finished,
            result=copy.deepcopy(kept.result) if kept.finished else None,
            checkpoint=None if kept.iteration is None else (kept.iteration, copy.deepcopy(kept.state)),
        )

    def _finish_loops(self, ends: LoopEnds) -> list[JsonValue]:
        recorded = []
        with self._lock:
            self._keep_events(ends.run_id, ends.events)
            run = self._runs.get(ends.run_id)
            if run is not None and ends.used:
                self._with_counts(run, ends.tokens)
            for row in ends.loops:
                kept = self._checkpoints.setdefault((ends.run_id, row["path"]), _Checkpoint())
                if not kept.finished:
                    kept.finished, kept.result = True, row["result"]
                recorded.append(copy.deepcopy(kept.result))
        return recorded

    # the bulk steps of a packed batch (store/bulk.py): one run at a time, each under the lock

    def _insert_runs(self, rows: list[tuple[dict[str, Any], RunOwner | None]]) -> list[bool]:
        created = []
        for values, owner in rows:
            try:
                self._insert_run(values, owner)
            except RunExistsError:
                created.append(False)
            else:
                created.append(True)
        return created

    def _runs_and_owners(self, run_ids: list[str]) -> dict[str, tuple[RunRecord, RunOwner | None]]:
        with self._lock:
            return {
                run_id: (_copied(self._runs[run_id]), self._owners.get(run_id))
                for run_id in run_ids
                if run_id in self._runs
            }

    def _mark_runs_running(self, run_ids: list[str]) -> tuple[set[str], list[str]]:
        marked, first_starts = set(), []
        for run_id in run_ids:
            try:
                was_marked, first_start = self._mark_running(run_id)
            except RunNotFoundError:
                continue
            if was_marked:
                marked.add(run_id)
            if first_start is not None:
                first_starts.append(first_start)
        return marked, first_starts

    def _start_runs_loops(self, loops: list[tuple[str, str]]) -> list[StartedLoop]:
        return [self.start_loops(run_id, [path])[0] for run_id, path in loops]

    def _finish_runs_loops(self, ends: list[LoopEnd]) -> list[JsonValue]:
        return [
            self.finish_loop(
                end.run_id,
                end.path,
                end.result,
                events=end.events,
                input_tokens=end.input_tokens,
                output_tokens=end.output_tokens,
            )
            for end in ends
        ]

    def _runs_events(self, run_ids: list[str], phase: list[str]) -> dict[str, list[dict[str, Any]]]:
        return {run_id: [event for _, event in self.events(run_id, phase=phase)] for run_id in run_ids}

    def _finish_runs(self, asked: list[Finish]) -> list[Ended | Refused]:
        return [self._finish_run(one) for one in asked]

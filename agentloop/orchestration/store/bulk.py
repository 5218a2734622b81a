"""``BulkRunStoreBase``: the lifecycle of many runs at once, for a packed batch.

A batch pack (``celery_adapter/batch_packs.py``) runs a hundred runs of its own on one event loop;
each would claim its run, mark it running, count its loop's delivery, record its loop's result with
its events, read its ends and end, every step a store call of its own. These methods take the step
of every run that is due at once (``store/batch_rounds.py`` gathers them per event-loop round) and
make it one statement, or one short transaction: each run's step is as atomic, and as checked, as
its single-run method, and a failure of the call (the store away) is every one of those runs'.

The public methods, their checks and their metrics are here; a store gives a primitive for each
(``_insert_runs``, ``_runs_and_owners``, ``_mark_runs_running``, ``_start_runs_loops``,
``_finish_runs_loops``, ``_runs_events``, ``_finish_runs``). The in-memory store takes one run at a
time under its lock; :class:`~agentloop.orchestration.store.sql.SqlRunStore` makes each one
statement, or one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentloop.orchestration.metrics import record as metrics
from agentloop.orchestration.store.base import (
    Ended,
    Finish,
    NewRun,
    Refused,
    RunStoreBase,
    asked_finish,
    settle_finish,
)
from agentloop.orchestration.store.checks import check_count
from agentloop.orchestration.store.json_values import JsonValue
from agentloop.orchestration.store.protocol import RunOwner, RunRecord, RunStore, StartedLoop

__all__ = ["BulkRunStoreBase", "LoopEnd", "RunEnd", "bulk_of"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopEnd:
    """A loop's result to record, with the events and usage its task leaves (``finish_loop``'s)."""

    run_id: str
    path: str
    result: JsonValue
    events: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class RunEnd:
    """The end asked of a run (``finish_run``'s arguments)."""

    run_id: str
    status: str
    output: JsonValue = None
    error: JsonValue | BaseException = None
    owner_token: str | None = None
    stopped_by: str | None = None


class BulkRunStoreBase(RunStoreBase):
    """:class:`RunStoreBase` with the bulk steps of a packed batch's runs (the module doc)."""

    def insert_runs(self, news: Sequence[NewRun]) -> list[bool]:
        """Record each pending run of ``news`` unless its id exists, at once; whether each was
        created here (``False``: it existed, and is left as it is)."""
        if not news:
            return []
        return self._insert_runs([(new.values(), new.owner) for new in news])

    def runs_and_owners(self, run_ids: Sequence[str]) -> dict[str, tuple[RunRecord, RunOwner | None]]:
        """The runs of ``run_ids`` that exist, each with the owner it was created with, in one read."""
        return self._runs_and_owners(list(dict.fromkeys(run_ids))) if run_ids else {}

    def mark_runs_running(self, run_ids: Sequence[str]) -> list[bool]:
        """:meth:`mark_running` for each of ``run_ids`` at once (``False``: it had ended, or is
        unknown); each first start is counted (``orchestration/metrics/``)."""
        if not run_ids:
            return []
        marked, first_starts = self._mark_runs_running(list(dict.fromkeys(run_ids)))
        for runnable in first_starts:
            metrics.run_started(runnable)
        return [run_id in marked for run_id in run_ids]

    def start_runs_loops(self, loops: Sequence[tuple[str, str]]) -> list[StartedLoop]:
        """:meth:`start_loops` for loops of several runs, ``(run_id, path)`` each (each once), at
        once: each loop's record and its count of deliveries, in their order."""
        return self._start_runs_loops(list(loops)) if loops else []

    def finish_runs_loops(self, ends: Sequence[LoopEnd]) -> list[JsonValue]:
        """:meth:`finish_loop` for loops of several runs (each once) at once, in one transaction:
        each loop's result as recorded (a first result stands), in their order."""
        for end in ends:
            check_count(end.input_tokens, "input_tokens")
            check_count(end.output_tokens, "output_tokens")
        return self._finish_runs_loops(list(ends)) if ends else []

    def runs_events(self, run_ids: Sequence[str], *, phase: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """The events of ``phase`` of each root run of ``run_ids``, oldest first, in one read."""
        unique = list(dict.fromkeys(run_ids))
        found = self._runs_events(unique, list(phase)) if unique else {}
        return {run_id: found.get(run_id, []) for run_id in unique}

    def finish_runs(self, ends: Sequence[RunEnd]) -> list[Exception | None]:
        """:meth:`finish_run` for several runs (each once) at once: ``None`` for each run ended
        here, else what :meth:`finish_run` would have raised for it (an ended run is never
        rewritten; an owned one ends only with its owner's token). A value no column can hold
        raises for them all, before anything is written."""
        asked = [
            asked_finish(
                end.run_id,
                status=end.status,
                output=end.output,
                error=end.error,
                owner_token=end.owner_token,
                stopped_by=end.stopped_by,
            )
            for end in ends
        ]
        answers: list[Exception | None] = []
        for one, done in zip(asked, self._finish_runs(asked) if asked else [], strict=True):
            try:
                settle_finish(one, done)
            except Exception as refused:
                answers.append(refused)
            else:
                answers.append(None)
        return answers

    # the primitives a store gives

    def _insert_runs(self, rows: list[tuple[dict[str, Any], RunOwner | None]]) -> list[bool]:
        """Insert each run's checked columns unless its id exists, at once; whether each was."""
        raise NotImplementedError

    def _runs_and_owners(self, run_ids: list[str]) -> dict[str, tuple[RunRecord, RunOwner | None]]:
        raise NotImplementedError

    def _mark_runs_running(self, run_ids: list[str]) -> tuple[set[str], list[str]]:
        """The runs marked, and the runnable of each first start."""
        raise NotImplementedError

    def _start_runs_loops(self, loops: list[tuple[str, str]]) -> list[StartedLoop]:
        raise NotImplementedError

    def _finish_runs_loops(self, ends: list[LoopEnd]) -> list[JsonValue]:
        raise NotImplementedError

    def _runs_events(self, run_ids: list[str], phase: list[str]) -> dict[str, list[dict[str, Any]]]:
        raise NotImplementedError

    def _finish_runs(self, asked: list[Finish]) -> list[Ended | Refused]:
        raise NotImplementedError


def bulk_of(store: RunStore) -> BulkRunStoreBase:
    """``store`` with its bulk steps (``TypeError`` for a store without them)."""
    if not isinstance(store, BulkRunStoreBase):
        raise TypeError(f"{type(store).__name__} has no bulk steps (store/bulk.py)")
    return store

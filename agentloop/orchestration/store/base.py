"""``RunStoreBase``: every public method of a run store, over the store's primitives.

A run store (:class:`~agentloop.orchestration.store.sql.SqlRunStore`,
:class:`~agentloop.orchestration.store.memory.InMemoryRunStore`) inherits the whole
:class:`~agentloop.orchestration.store.protocol.RunStore` surface from here. The base checks every
value (``ValueError`` naming the field, before any storage sees it), turns the keywords into the
rows and values below, answers what needs no storage (an id no run can have), and counts the
metrics of a first start and of an end (``orchestration/metrics/``), so a store can forget
neither. The promises are the protocol's; this module says who keeps them.

A store gives the primitives, each one atomic step on its storage, taking checked values:

- runs: ``_insert_run(values, owner)``, ``_insert_unless_open(values)``, ``_run_owner_and_status(run_id)``,
  ``_mark_running(run_id)``, ``_finish_run(asked)`` (a :class:`Finish`), ``_get_run(run_id)``,
  ``_list_runs(query)`` (a :class:`RunQuery`), ``_child_counts(parent_run_id)``,
  ``_count_runs(statuses)``;
- counters and cancel flags: ``_add_counts(run_id, counts)``, ``_request_cancel(run_id)``,
  ``_is_cancel_requested(run_id)``;
- events: ``_append_events(root_run_id, rows)``, ``_events(query)`` (an :class:`EventQuery`);
- loops: ``_save_checkpoints(run_id, rows, events, tokens)``, ``_loop_records(run_id, paths)``,
  ``_start_loops(run_id, paths)``, ``_finish_loops(ends)`` (a :class:`LoopEnds`).

Three more have a default made of the ones above, which a store may replace with a cheaper
statement: ``_save_checkpoint(row)``, ``_loop_record(run_id, path)``, ``_finish_loop(ends)``.
``docs/development.md`` says the same for whoever writes a third store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentloop.loops.run_outcome import MODEL_UNAVAILABLE, STOPPED_BY_BOUND
from agentloop.orchestration.metrics import record as metrics
from agentloop.orchestration.store.checks import (
    check_count,
    check_finish,
    check_terminal_status,
    error_value,
    event_rows,
    is_storable_id,
    loop_row,
    new_run_values,
    run_key,
)
from agentloop.orchestration.store.json_values import JsonValue, to_json_value
from agentloop.orchestration.store.protocol import (
    CHILD_SUMS,
    OPEN_STATUSES,
    LoopRecord,
    RunOwner,
    RunRecord,
    StartedLoop,
)
from agentloop.orchestration.store.tables import utcnow

__all__ = [
    "Ended",
    "EventQuery",
    "Finish",
    "LoopEnds",
    "NewRun",
    "Outcome",
    "Refused",
    "Rows",
    "RunQuery",
    "RunStoreBase",
    "asked_finish",
    "settle_finish",
]

#: A checked end of a run: its terminal status, stored output and stored error.
Outcome = tuple[str, JsonValue, JsonValue]
#: Rows of ``run_events`` or ``checkpoints``, checked (``checks.event_rows``, ``checks.loop_row``).
Rows = list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True, slots=True)
class NewRun:
    """A pending run to record: what :meth:`RunStoreBase.create_run`'s keywords say, as one value."""

    run_id: str
    runnable: str
    input: JsonValue
    root_run_id: str | None = None
    """The root of its workflow (``None``: the run is a root)."""
    parent_run_id: str | None = None
    path: str = ""
    token_budget: int | None = None
    celery_task_id: str | None = None
    owner: RunOwner | None = None
    """Who may end it (``None``: anyone)."""
    principal: str | None = None
    """The HTTP caller that started it, if one did."""
    forked_from: Mapping[str, Any] | None = None
    """The recorded run and step it was forked from (``agentloop replay --fork-at``), if it was."""

    def values(self) -> dict[str, Any]:
        """The columns of the new run, every value checked (``ValueError`` naming the field)."""
        return new_run_values(
            run_id=self.run_id,
            runnable=self.runnable,
            input=self.input,
            root_run_id=self.root_run_id,
            parent_run_id=self.parent_run_id,
            path=self.path,
            token_budget=self.token_budget,
            celery_task_id=self.celery_task_id,
            principal=self.principal,
            forked_from=self.forked_from,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Finish:
    """An end asked of a run, checked: what :meth:`RunStoreBase.finish_run` hands its store."""

    run_id: str
    outcome: Outcome
    ended: datetime
    owner_token: str | None
    stopped_by: str | None


@dataclass(frozen=True, slots=True)
class Ended:
    """A run ended by this call: its runnable and when it started (or was created, never started)."""

    runnable: str
    started_at: datetime


@dataclass(frozen=True, slots=True)
class Refused:
    """A run this call did not end: the stored run (``None``: unknown) and its owner."""

    record: RunRecord | None
    owner: RunOwner | None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunQuery:
    """Which runs :meth:`RunStoreBase.list_runs` lists, checked: the newest first, ``offset`` of
    them skipped, at most ``limit``, only those matching every filter given (``None``: any)."""

    limit: int
    offset: int
    status: str | None
    runnable: str | None
    parent_run_id: str | None
    principal: str | None

    def matches(self, record: RunRecord) -> bool:
        """Whether ``record`` passes the filters (for a store that filters in Python)."""
        return all(
            wanted is None or getattr(record, name) == wanted
            for name, wanted in (
                ("status", self.status),
                ("runnable", self.runnable),
                ("parent_run_id", self.parent_run_id),
                ("principal", self.principal),
            )
        )


#: The phases of the events a run's end is judged on (:func:`judges_the_end`).
END_PHASES = (MODEL_UNAVAILABLE, "done")


@dataclass(frozen=True, kw_only=True, slots=True)
class EventQuery:
    """Which events :meth:`RunStoreBase.events` reads, checked: those of root run ``run_id``
    above ``after_id``, oldest first, at most ``limit``; of ``phases`` and ``status`` when given.
    ``ends``: only those a run's end is judged on (:meth:`RunStoreBase.run_end_events`)."""

    run_id: str
    after_id: int
    limit: int | None
    phases: tuple[str, ...] | None
    status: str | None
    ends: bool = False

    def matches(self, event_id: int, row: Mapping[str, Any]) -> bool:
        """Whether an event, its id and row (``checks.event_rows``), is one asked for."""
        return (
            event_id > self.after_id
            and (self.phases is None or row["phase"] in self.phases)
            and (self.status is None or row["status"] == self.status)
            and (not self.ends or judges_the_end(row["phase"], row["payload"]))
        )


def judges_the_end(phase: str, payload: Mapping[str, Any]) -> bool:
    """Whether an event is one a run's end is judged on (``loops/run_outcome.py``): a model
    failure, or the ``done`` event of a loop that stopped at its bound."""
    if phase == MODEL_UNAVAILABLE:
        return True
    data = payload.get("data")
    return phase == "done" and isinstance(data, Mapping) and data.get("stopped_by") == STOPPED_BY_BOUND


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopEnds:
    """Loops' results to record under ``run_id`` (``loops``: one checked row each, each path once),
    with ``events`` to append and ``tokens`` to add to the run's usage, all in one step."""

    run_id: str
    loops: Rows
    events: Rows
    tokens: dict[str, int]
    """``{"input_tokens", "output_tokens"}``, checked."""

    @property
    def used(self) -> bool:
        """Whether there are tokens to add."""
        return any(self.tokens.values())


def _tokens(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": check_count(input_tokens, "input_tokens"),
        "output_tokens": check_count(output_tokens, "output_tokens"),
    }


def _phases(phase: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if phase is None:
        return None
    return (phase,) if isinstance(phase, str) else tuple(phase)


def asked_finish(
    run_id: str,
    *,
    status: str,
    output: JsonValue = None,
    error: JsonValue | BaseException = None,
    owner_token: str | None = None,
    stopped_by: str | None = None,
) -> Finish:
    """The end asked of run ``run_id`` (:meth:`RunStoreBase.finish_run`'s arguments), checked."""
    outcome: Outcome = (
        check_terminal_status(status),
        to_json_value(output, what=f"output of run {run_key(run_id)}"),
        to_json_value(error_value(error), what=f"error of run {run_key(run_id)}"),
    )
    return Finish(
        run_id=run_id, outcome=outcome, ended=utcnow(), owner_token=owner_token, stopped_by=stopped_by
    )


def settle_finish(asked: Finish, done: Ended | Refused) -> None:
    """What a store's answer to ``asked`` comes to: the run's end counted once, where this call
    ended it (``orchestration/metrics/``), else the refusal raised (``check_finish``)."""
    if isinstance(done, Ended):  # ended here, now: counted once, whoever else tries
        metrics.run_ended(done.runnable, asked.outcome[0], done.started_at, asked.ended)
        return
    check_finish(
        done.record, done.owner, run_id=asked.run_id, owner_token=asked.owner_token, outcome=asked.outcome
    )


class RunStoreBase:
    """The public methods of a run store, their checks and their metrics, over its primitives
    (module doc). Each method's promise is documented on
    :class:`~agentloop.orchestration.store.protocol.RunStore`."""

    # runs

    def create_run(
        self,
        *,
        run_id: str,
        runnable: str,
        input: JsonValue,
        root_run_id: str | None = None,
        parent_run_id: str | None = None,
        path: str = "",
        token_budget: int | None = None,
        celery_task_id: str | None = None,
        owner: RunOwner | None = None,
        principal: str | None = None,
        forked_from: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """Record a pending run; :class:`~agentloop.orchestration.errors.RunExistsError` if the id exists."""
        new = NewRun(
            run_id=run_id,
            runnable=runnable,
            input=input,
            root_run_id=root_run_id,
            parent_run_id=parent_run_id,
            path=path,
            token_budget=token_budget,
            celery_task_id=celery_task_id,
            owner=owner,
            principal=principal,
            forked_from=forked_from,
        )
        return self.insert_run(new)

    def insert_run(self, new: NewRun) -> RunRecord:
        """:meth:`create_run` for a :class:`NewRun` value."""
        return self._insert_run(new.values(), new.owner)

    def create_run_unless_open(
        self, *, run_id: str, runnable: str, input: JsonValue, celery_task_id: str | None = None
    ) -> RunRecord:
        """Record pending root run ``run_id`` unless a run of ``runnable`` is open; see the protocol."""
        new = NewRun(run_id=run_id, runnable=runnable, input=input, celery_task_id=celery_task_id)
        return self._insert_unless_open(new.values())

    def run_owner(self, run_id: str) -> RunOwner | None:
        """The owner the run was created with (``None``: anyone may end it)."""
        return self._run_owner_and_status(run_id)[0]

    def run_owner_and_status(self, run_id: str) -> tuple[RunOwner | None, str]:
        """:meth:`run_owner` and the run's status, in one read (what a task's node is admitted on:
        ``orchestration/runtime/run_gate.py``)."""
        return self._run_owner_and_status(run_id)

    def mark_running(self, run_id: str) -> bool:
        """Mark the run running, keeping its first start time; ``False`` when it had already ended.

        Its first start is counted (``orchestration/metrics/``); a redelivery or a resumed wait is not."""
        marked, first_start = self._mark_running(run_id)
        if first_start is not None:
            metrics.run_started(first_start)
        return marked

    def finish_run(
        self,
        run_id: str,
        *,
        status: str,
        output: JsonValue = None,
        error: JsonValue | BaseException = None,
        owner_token: str | None = None,
        stopped_by: str | None = None,
    ) -> None:
        """End the run with a terminal ``status``; ``error`` may be an exception or ``{"type", ...}``;
        ``stopped_by`` says how a run that returned ended (``"complete"`` or ``"bound"``).

        Only a run that has not ended, and only with its owner's token when it has one.
        """
        asked = asked_finish(
            run_id, status=status, output=output, error=error, owner_token=owner_token, stopped_by=stopped_by
        )
        settle_finish(asked, self._finish_run(asked))

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run, or ``None``."""
        return self._get_run(run_id) if is_storable_id(run_id) else None

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

        def text(value: str | None) -> str | None:
            return None if value is None else str(value)

        query = RunQuery(
            limit=check_count(limit, "limit"),
            offset=check_count(offset, "offset"),
            status=text(status),
            runnable=text(runnable),
            parent_run_id=text(parent_run_id),
            principal=text(principal),
        )
        return self._list_runs(query)

    def summarize_children(self, parent_run_id: str) -> dict[str, Any]:
        """Counts per status, and the :data:`CHILD_SUMS`, of the runs whose parent is ``parent_run_id``."""
        by_status: dict[str, int] = {}
        totals = dict.fromkeys(CHILD_SUMS, 0)
        for status, count, sums in self._child_counts(str(parent_run_id)):
            by_status[status] = by_status.get(status, 0) + count
            for name, value in zip(CHILD_SUMS, sums, strict=True):
                totals[name] += value
        return {"total": sum(by_status.values()), "by_status": by_status, **totals}

    def count_open_runs(self) -> dict[tuple[str, str], int]:
        """Runs not ended (pending, running, waiting), by ``(runnable, status)``. Tried once, not
        retried: a scrape answers now or leaves the gauge out (``orchestration/metrics/fleet.py``)."""
        return self._count_runs(OPEN_STATUSES)

    # counters and cancel flags

    def add_usage(self, run_id: str, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        """Atomically add token usage to the run; returns its new ``(input, output)`` totals."""
        totals = self._add_counts(run_id, _tokens(input_tokens, output_tokens))
        return totals["input_tokens"], totals["output_tokens"]

    def add_cache_usage(self, run_id: str, *, hits: int = 0, misses: int = 0, tokens_saved: int = 0) -> None:
        """Atomically add step-cache hits, misses and tokens saved to the run."""
        self._add_counts(
            run_id,
            {
                "cache_hits": check_count(hits, "cache_hits"),
                "cache_misses": check_count(misses, "cache_misses"),
                "tokens_saved": check_count(tokens_saved, "tokens_saved"),
            },
        )

    def add_tool_calls(self, run_id: str, calls: int = 1) -> None:
        """Atomically add ``calls`` MCP tool calls to the run."""
        self._add_counts(run_id, {"tool_calls": check_count(calls, "tool_calls")})

    def request_cancel(self, run_id: str) -> None:
        """Ask the whole workflow of ``run_id`` to stop: flags the run and its root run."""
        self._request_cancel(run_id)

    def is_cancel_requested(self, run_id: str) -> bool:
        """Whether cancellation was requested for the run or its root run (``False`` if unknown)."""
        return is_storable_id(run_id) and self._is_cancel_requested(run_id)

    # events

    def append_events(self, root_run_id: str, events: Sequence[Mapping[str, Any]]) -> None:
        """Store progress events under ``root_run_id`` at once, in order (a path's second ``failed``
        event is left out)."""
        rows = event_rows(root_run_id, events)
        if rows:
            self._append_events(root_run_id, rows)

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
        if not is_storable_id(run_id):
            return []
        query = EventQuery(
            run_id=run_id, after_id=after_id, limit=limit, phases=_phases(phase), status=status
        )
        return self._events(query)

    def run_end_events(self, run_id: str) -> list[tuple[int, dict[str, Any]]]:
        """The events root run ``run_id``'s end is judged on, oldest first: its model failures
        and the ``done`` events of its loops that stopped at their bound (:func:`judges_the_end`),
        picked by the store: a run of 50 stages reads none of its 50 other ``done`` events."""
        if not is_storable_id(run_id):
            return []
        query = EventQuery(run_id=run_id, after_id=0, limit=None, phases=END_PHASES, status=None, ends=True)
        return self._events(query)

    # loops

    def save_checkpoint(self, run_id: str, path: str, iteration: int, state: JsonValue) -> None:
        """Replace the loop's checkpoint with ``(iteration, state)`` (a finished loop's record stays)."""
        self._save_checkpoint(loop_row(run_id, path, checkpoint=(iteration, state)))

    def save_checkpoints(
        self,
        run_id: str,
        checkpoints: Sequence[tuple[str, int, JsonValue]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> None:
        """:meth:`save_checkpoint` for each ``(path, iteration, state)`` with ``events`` appended
        first and the tokens added to the run's usage, at once."""
        rows = [
            loop_row(run_id, path, checkpoint=(iteration, state)) for path, iteration, state in checkpoints
        ]
        batch = event_rows(run_id, events)
        tokens = _tokens(input_tokens, output_tokens)
        if rows or batch or any(tokens.values()):
            self._save_checkpoints(run_id, rows, batch, tokens)

    def loop_record(self, run_id: str, path: str) -> LoopRecord:
        """Whether the loop at ``path`` finished, its result and its latest checkpoint, in one read."""
        return self._loop_record(run_id, path)

    def loop_records(self, run_id: str, paths: Sequence[str]) -> list[LoopRecord]:
        """:meth:`loop_record` of each of ``paths``, in their order, read together."""
        return self._loop_records(run_id, paths)

    def start_loops(self, run_id: str, paths: Sequence[str]) -> list[StartedLoop]:
        """Count one more delivery of each loop at ``paths`` and return its record, in their order."""
        return self._start_loops(run_id, paths)

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
        ends = LoopEnds(
            run_id=run_id,
            loops=[row],
            events=event_rows(run_id, events),
            tokens=_tokens(input_tokens, output_tokens),
        )
        return self._finish_loop(ends)

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
        """:meth:`finish_loop`, then :meth:`start_loops` of ``next_path``, in one step (a pipeline's
        stage ends and the next one starts with one commit); the result as recorded and the
        next loop's record."""
        ends = LoopEnds(
            run_id=run_id,
            loops=[loop_row(run_id, path, result=result)],
            events=event_rows(run_id, events),
            tokens=_tokens(input_tokens, output_tokens),
        )
        return self._finish_loop_then_start(ends, str(next_path))

    def finish_loops(
        self,
        run_id: str,
        results: Sequence[tuple[str, JsonValue]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> list[JsonValue]:
        """:meth:`finish_loop` for each ``(path, result)``, at once; the results as recorded, in order."""
        ends = LoopEnds(
            run_id=run_id,
            loops=[loop_row(run_id, path, result=result) for path, result in results],
            events=event_rows(run_id, events),
            tokens=_tokens(input_tokens, output_tokens),
        )
        if not (ends.loops or ends.events or ends.used):
            return []
        return self._finish_loops(ends)

    # the primitives a store gives (module doc); every value they take is checked

    def _insert_run(self, values: dict[str, Any], owner: RunOwner | None) -> RunRecord:
        """Insert the run of ``values`` (its columns) owned by ``owner``; the stored run, or
        :class:`~agentloop.orchestration.errors.RunExistsError` carrying the one stored before."""
        raise NotImplementedError

    def _insert_unless_open(self, values: dict[str, Any]) -> RunRecord:
        """Insert the root run of ``values`` unless its runnable has an open run, as one step; the
        run of that id when it exists now, else the earliest open run of the runnable."""
        raise NotImplementedError

    def _run_owner_and_status(self, run_id: str) -> tuple[RunOwner | None, str]:
        """The run's owner and status; :class:`~agentloop.orchestration.errors.RunNotFoundError` if
        unknown."""
        raise NotImplementedError

    def _mark_running(self, run_id: str) -> tuple[bool, str | None]:
        """Mark an open run running, its start time set if it had none: ``(marked, the runnable
        if this was its first start)``; ``RunNotFoundError`` if unknown."""
        raise NotImplementedError

    def _finish_run(self, asked: Finish) -> Ended | Refused:
        """End the run as ``asked`` if it is open and the token is its owner's (or it has none)."""
        raise NotImplementedError

    def _get_run(self, run_id: str) -> RunRecord | None:
        """The run (a copy the caller may keep), or ``None``."""
        raise NotImplementedError

    def _list_runs(self, query: RunQuery) -> list[RunRecord]:
        """The runs ``query`` asks for, newest first (by ``created_at``, then ``id``)."""
        raise NotImplementedError

    def _child_counts(self, parent_run_id: str) -> Iterable[tuple[str, int, Sequence[int]]]:
        """``(status, count, sums)`` of the runs whose parent is ``parent_run_id``, a status at a
        time: ``sums`` of the :data:`CHILD_SUMS` columns, in that order."""
        raise NotImplementedError

    def _count_runs(self, statuses: frozenset[str]) -> dict[tuple[str, str], int]:
        """The runs of ``statuses`` by ``(runnable, status)``, tried once."""
        raise NotImplementedError

    def _add_counts(self, run_id: str, counts: dict[str, int]) -> dict[str, int]:
        """Add each of ``counts`` (checked, never negative) to the run's column of that name in one
        atomic step; the new totals of those columns. Raises
        :class:`~agentloop.orchestration.errors.RunNotFoundError` for an unknown run."""
        raise NotImplementedError

    def _request_cancel(self, run_id: str) -> None:
        """Flag the run and its root run cancelled; ``RunNotFoundError`` if unknown."""
        raise NotImplementedError

    def _is_cancel_requested(self, run_id: str) -> bool:
        """Whether the run or its root run is flagged (``False`` if unknown)."""
        raise NotImplementedError

    def _append_events(self, root_run_id: str, rows: Rows) -> None:
        """Keep event ``rows`` (at least one) in their order, leaving out a ``failed`` one for a path
        that has one already, even against a concurrent writer."""
        raise NotImplementedError

    def _events(self, query: EventQuery) -> list[tuple[int, dict[str, Any]]]:
        """The events ``query`` asks for, ``(id, payload)``, oldest first (payloads the caller may keep)."""
        raise NotImplementedError

    def _save_checkpoints(self, run_id: str, rows: Rows, events: Rows, tokens: dict[str, int]) -> None:
        """Append ``events`` (each level failing once), add ``tokens`` (``{"input_tokens",
        "output_tokens"}``, checked) to the run's usage (none to an unknown run), then replace each
        loop's checkpoint with its row and set its deliveries back to 0, unless the loop finished:
        one step."""
        raise NotImplementedError

    def _save_checkpoint(self, row: dict[str, Any]) -> None:
        """One loop's checkpoint (by default :meth:`_save_checkpoints` of the one row)."""
        self._save_checkpoints(row["run_id"], [row], [], _tokens(0, 0))

    def _loop_records(self, run_id: str, paths: Sequence[str]) -> list[LoopRecord]:
        """The record of each loop at ``paths``, in their order, in one read."""
        raise NotImplementedError

    def _loop_record(self, run_id: str, path: str) -> LoopRecord:
        """One loop's record (by default :meth:`_loop_records` of the one path)."""
        return self._loop_records(run_id, [path])[0]

    def _start_loops(self, run_id: str, paths: Sequence[str]) -> list[StartedLoop]:
        """Add one delivery to each loop at ``paths`` (a row made for a loop with none) and read its
        record with the count, in their order, in one step."""
        raise NotImplementedError

    def _finish_loops(self, ends: LoopEnds) -> list[JsonValue]:
        """Append ``ends.events`` (as they are), add ``ends.tokens`` to the run (none to an unknown
        run) and record each loop's result unless it has one, in one step; the results that stand,
        in order."""
        raise NotImplementedError

    def _finish_loop(self, ends: LoopEnds) -> JsonValue:
        """One loop's end (by default :meth:`_finish_loops` of the one loop)."""
        return self._finish_loops(ends)[0]

    def _finish_loop_then_start(self, ends: LoopEnds, next_path: str) -> tuple[JsonValue, StartedLoop]:
        """One loop's end, then the start of the loop at ``next_path`` (by default
        :meth:`_finish_loop` then :meth:`_start_loops`: a store in memory dies with its process, so
        nothing comes between the two)."""
        return self._finish_loop(ends), self._start_loops(ends.run_id, [next_path])[0]

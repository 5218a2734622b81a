"""What the run store promises: its values and its protocol (its errors: ``errors.py``).

:class:`RunStore` is satisfied by :class:`~agentloop.orchestration.store.SqlRunStore`
(SQLite/PostgreSQL) and by its in-memory twin
:class:`~agentloop.orchestration.store.InMemoryRunStore`; code that needs a run store
should ask for the protocol. Both inherit every method from
:class:`~agentloop.orchestration.store.base.RunStoreBase`, which keeps the promises below over
each store's primitives (``docs/development.md``, "Adding a run store").

A run id is an idempotency key: :meth:`RunStore.create_run` refuses an id that
exists (:class:`RunExistsError`, carrying the stored run), and a run that has
ended is never rewritten (:meth:`RunStore.finish_run` refuses with
:class:`RunAlreadyEndedError`, unless it is asked for the very outcome stored).
A run created with a :class:`RunOwner` ends only for a caller presenting its
token (:class:`RunOwnershipError`). Every text and number is checked against
what the columns hold before a database sees it (``ValueError`` naming the
field), so the SQL stores and the memory twin accept exactly the same values.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple, Protocol, runtime_checkable

from agentloop.orchestration.store.json_values import JsonValue


class RunStatus(StrEnum):
    """Where a run is in its life. Values are the strings stored in ``runs.status``."""

    PENDING = "pending"
    RUNNING = "running"
    #: Paused until a person answers a question (``orchestration/celery_adapter/pause.py``,
    #: ``orchestration/store/waits.py``); not an end.
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    #: It returned its result, but model calls failed on the way (the error lists them).
    DEGRADED = "degraded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    BUDGET_EXCEEDED = "budget_exceeded"


TERMINAL_STATUSES: frozenset[str] = frozenset(
    status.value
    for status in RunStatus
    if status not in (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING)
)
"""The statuses :meth:`RunStore.finish_run` accepts; a run in one of them has ended."""

OPEN_STATUSES: frozenset[str] = frozenset(
    {RunStatus.PENDING.value, RunStatus.RUNNING.value, RunStatus.WAITING.value}
)
"""The statuses of a run that has not ended (:meth:`RunStore.count_open_runs` counts them)."""

#: A run's usage columns (:meth:`RunRecord.usage`), the ones its children are summed on
#: (:meth:`RunStore.summarize_children`).
CHILD_SUMS = ("input_tokens", "output_tokens", "cache_hits", "cache_misses", "tokens_saved", "tool_calls")


def _datetime_to_json(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _datetime_from_json(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    """One row of ``runs`` as an immutable value. Timestamps are timezone-aware UTC."""

    id: str
    root_run_id: str
    parent_run_id: str | None
    runnable: str
    path: str
    status: str
    input: JsonValue
    output: JsonValue
    error: JsonValue
    input_tokens: int
    output_tokens: int
    token_budget: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    celery_task_id: str | None
    cancel_requested: bool
    #: Step-cache use (``actions/caching.py``): hits, misses, and the tokens the hits saved.
    cache_hits: int = 0
    cache_misses: int = 0
    tokens_saved: int = 0
    #: MCP tool calls the run made (``orchestration/mcp/tools.py``): each one a server answered or
    #: failed, not those a resumed loop read from its checkpoint or a replay from its recording.
    tool_calls: int = 0
    #: Whose run it is over HTTP: the principal of the token that started it (``agentloop serve``),
    #: ``None`` for a run started another way. Not its :class:`RunOwner` (who may end it).
    principal: str | None = None
    #: How a run that returned (``succeeded`` or ``degraded``) ended: ``"complete"``, or
    #: ``"bound"`` when a loop of it hit its ``max_iterations`` before it was complete; ``None``
    #: for a run that did not return (or ended before the store kept it).
    stopped_by: str | None = None
    #: The run this one was forked from (``agentloop replay RUN --fork-at PATH:ITERATION``,
    #: ``orchestration/forks/``): ``{"run_id", "path", "iteration"}``; ``None`` for any other run.
    forked_from: JsonValue = None

    @property
    def is_root(self) -> bool:
        """Whether this run is a whole workflow rather than one task of one."""
        return self.id == self.root_run_id

    @property
    def is_finished(self) -> bool:
        """Whether the run has ended, whatever the outcome."""
        return self.status in TERMINAL_STATUSES

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens used so far."""
        return self.input_tokens + self.output_tokens

    def usage(self) -> dict[str, int]:
        """What the run used so far: tokens, step-cache hits, misses and tokens saved, MCP tool calls
        (the ``usage`` of ``agentloop.progress``, of ``RunHandle.usage`` and of ``GET /runs/{id}``)."""
        return {name: getattr(self, name) for name in CHILD_SUMS}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (timestamps as ISO 8601 strings)."""
        data = asdict(self)
        for name in ("created_at", "started_at", "finished_at"):
            data[name] = _datetime_to_json(data[name])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        """The record :meth:`to_dict` produced; unknown keys are ignored."""
        values: dict[str, Any] = {field.name: data.get(field.name) for field in fields(cls)}
        created_at = _datetime_from_json(values["created_at"])
        if created_at is None:
            raise ValueError("a run record needs created_at")
        values.update(
            created_at=created_at,
            started_at=_datetime_from_json(values["started_at"]),
            finished_at=_datetime_from_json(values["finished_at"]),
            path=values["path"] or "",
            input_tokens=int(values["input_tokens"] or 0),
            output_tokens=int(values["output_tokens"] or 0),
            cache_hits=int(values["cache_hits"] or 0),
            cache_misses=int(values["cache_misses"] or 0),
            tokens_saved=int(values["tokens_saved"] or 0),
            tool_calls=int(values.get("tool_calls") or 0),
            cancel_requested=bool(values["cancel_requested"]),
        )
        return cls(**values)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOwner:
    """Who may end a run: the launch whose message has ``launch_digest``, holding ``token``.

    ``token`` is a secret drawn when the run is created; only the tasks of the
    canvas that launch builds carry it (``repr`` does not show it).
    """

    launch_digest: str
    token: str = field(repr=False)

    @classmethod
    def new(cls, launch_digest: str) -> RunOwner:
        """An owner with a fresh random token."""
        return cls(launch_digest=launch_digest, token=secrets.token_urlsafe(24))

    def holds(self, token: str | None) -> bool:
        """Whether ``token`` is this owner's (compared in constant time)."""
        return token is not None and hmac.compare_digest(self.token.encode(), token.encode())


class LoopRecord(NamedTuple):
    """What the store knows of one loop of a run, read at once when its task starts.

    ``checkpoint`` is the ``(iteration, state)`` last saved (``None`` before the
    first); ``result`` is meaningful only when ``finished``.
    """

    finished: bool
    result: JsonValue
    checkpoint: tuple[int, JsonValue] | None


class StartedLoop(NamedTuple):
    """A loop's record as a task starts it (:meth:`RunStore.start_loops`), and ``deliveries``: how
    many tasks started it since its last checkpoint, this one included (what the delivery limit,
    ``AGENTLOOP_DELIVERY_LIMIT``, judges on every broker)."""

    record: LoopRecord
    deliveries: int


@runtime_checkable
class RunStore(Protocol):
    """Runs, their progress events, token usage, cancellation and loop checkpoints.

    Every method is synchronous and safe to call from several threads; the SQL
    implementation is also safe across processes sharing one database.
    """

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
        """Record a pending run (root when ``root_run_id`` is None), owned by ``owner`` when given,
        started by ``principal`` (an HTTP caller) when given, forked from the recorded run and
        place ``forked_from`` names (``{"run_id", "path", "iteration"}``) when given.

        Raises :class:`RunExistsError` (with the stored run) when the id exists,
        ``ValueError`` for a value its column cannot hold.
        """
        ...

    def create_run_unless_open(
        self, *, run_id: str, runnable: str, input: JsonValue, celery_task_id: str | None = None
    ) -> RunRecord:
        """Record pending root run ``run_id`` unless a run of ``runnable`` has not ended, as one atomic
        step (two callers at the same instant never both create one).

        Returns the run ``run_id`` when it exists now (created here, or before: a redelivery), else
        the earliest run of ``runnable`` that has not ended, which kept this one from being created.
        ``ValueError`` for a value its column cannot hold.
        """
        ...

    def run_owner(self, run_id: str) -> RunOwner | None:
        """The owner the run was created with (``None``: anyone may end it)."""
        ...

    def run_owner_and_status(self, run_id: str) -> tuple[RunOwner | None, str]:
        """:meth:`run_owner` and the run's status, in one read (what a task's node is admitted on)."""
        ...

    def mark_running(self, run_id: str) -> bool:
        """Mark the run running (first start time kept); ``False`` when it had already ended."""
        ...

    def finish_run(
        self,
        run_id: str,
        *,
        status: str,
        output: JsonValue = None,
        error: JsonValue = None,
        owner_token: str | None = None,
        stopped_by: str | None = None,
    ) -> None:
        """End the run with a terminal ``status`` and its ``output`` or ``error`` (``{"type", ...}``),
        and, for a run that returned, how it ended (``stopped_by``: ``"complete"`` or ``"bound"``).

        An ended run is not rewritten (:class:`RunAlreadyEndedError`; asking for
        the outcome it has is a no-op); an owned run ends only with its owner's
        token (:class:`RunOwnershipError`).
        """
        ...

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run, or ``None``."""
        ...

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
        """The most recently created runs first, optionally filtered (``principal``: only the runs
        that principal started), after skipping ``offset`` of them."""
        ...

    def summarize_children(self, parent_run_id: str) -> dict[str, Any]:
        """``{"total", "by_status"}`` of a run's child runs, with each of :data:`CHILD_SUMS` summed."""
        ...

    def count_open_runs(self) -> dict[tuple[str, str], int]:
        """Runs not ended (:data:`OPEN_STATUSES`: pending, running, waiting on a person), counted by
        ``(runnable, status)``; what the metrics' gauges show (``orchestration/metrics/fleet.py``),
        so it is tried once: a database that is away raises at once, never after the retries."""
        ...

    def append_events(self, root_run_id: str, events: Sequence[Mapping[str, Any]]) -> None:
        """Store progress events under the root run ``root_run_id`` in one transaction, in order.

        Each event's id (its place in the order) is what :meth:`events` returns with it. A
        ``failed`` event for a path that has one already is left out, even when two writers
        append at once: each level of a run fails once (two of its tasks failing together both
        report the levels that enclose them).
        """
        ...

    def events(
        self,
        run_id: str,
        *,
        after_id: int = 0,
        limit: int | None = None,
        phase: str | Sequence[str] | None = None,
        status: str | None = None,
    ) -> list[tuple[int, dict[str, Any]]]:
        """The root run's events with an id above ``after_id``, oldest first, as ``(id, event)``;
        only those of ``phase`` (or of any of several phases) and of ``status`` when given (read
        without the others)."""
        ...

    def run_end_events(self, run_id: str) -> list[tuple[int, dict[str, Any]]]:
        """The events the root run's end is judged on, oldest first, as ``(id, event)``: its model
        failures and the ``done`` events of its loops that stopped at their bound (read without
        the others)."""
        ...

    def request_cancel(self, run_id: str) -> None:
        """Ask the whole workflow ``run_id`` belongs to to stop (the flag is set on its root run)."""
        ...

    def is_cancel_requested(self, run_id: str) -> bool:
        """Whether cancellation was requested for the workflow ``run_id`` belongs to."""
        ...

    def add_usage(self, run_id: str, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        """Atomically add token usage to the run; returns its new ``(input, output)`` totals."""
        ...

    def add_cache_usage(self, run_id: str, *, hits: int = 0, misses: int = 0, tokens_saved: int = 0) -> None:
        """Atomically add step-cache hits, misses and tokens saved to the run."""
        ...

    def add_tool_calls(self, run_id: str, calls: int = 1) -> None:
        """Atomically add ``calls`` MCP tool calls to the run."""
        ...

    def save_checkpoint(self, run_id: str, path: str, iteration: int, state: JsonValue) -> None:
        """Keep ``state`` as the latest checkpoint of the loop at ``path`` (replacing the previous one);
        a finished loop's record is left as it is (a duplicate task of it may still be running)."""
        ...

    def loop_record(self, run_id: str, path: str) -> LoopRecord:
        """Whether the loop at ``path`` finished, its result and its latest checkpoint, in one read."""
        ...

    def loop_records(self, run_id: str, paths: Sequence[str]) -> list[LoopRecord]:
        """:meth:`loop_record` of each of ``paths``, in their order, read together (a redelivered
        pack's branches: ``docs/how-to/packing.md``)."""
        ...

    def start_loops(self, run_id: str, paths: Sequence[str]) -> list[StartedLoop]:
        """Count one more delivery of each loop at ``paths`` and return its record with the count,
        in their order, in one statement (a task's start: every delivery reads what an earlier
        try or a duplicate left, redelivered or not). Saving a checkpoint sets the count back to
        0: it counts the deliveries that made no progress."""
        ...

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
        """Record the loop's ``result`` (its checkpoint is kept), append ``events`` under
        ``run_id`` and add the tokens to the run's usage, in one transaction; return the loop's
        result as recorded.

        A loop's first recorded result is never replaced: a duplicate task of the same loop
        that finishes later appends its events (work that happened) and gets the first result
        back, which it returns in place of its own, so every task after it sees one result.
        """
        ...

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
        """:meth:`finish_loop` of the loop at ``path``, then :meth:`start_loops` of the loop at
        ``next_path``, in one transaction: the result as recorded and the next loop's record (a
        pipeline's stage and the stage after it, run by one task: ``docs/how-to/packing.md``)."""
        ...

    def save_checkpoints(
        self,
        run_id: str,
        checkpoints: Sequence[tuple[str, int, JsonValue]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> None:
        """:meth:`save_checkpoint` for several loops of run ``run_id`` at once, ``(path, iteration,
        state)`` each, with ``events`` appended under ``run_id`` first and the tokens added to the
        run's usage, in one transaction (the branches of one pack and the events they emitted up
        to their checkpoints: ``docs/how-to/packing.md``; the usage of the model calls before a
        checkpoint, not written yet: a checkpoint never stands without it)."""
        ...

    def finish_loops(
        self,
        run_id: str,
        results: Sequence[tuple[str, JsonValue]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> list[JsonValue]:
        """:meth:`finish_loop` for several loops of run ``run_id`` at once, ``(path, result)`` each,
        in one transaction: the results as recorded, in order (a first result stands, per loop)."""
        ...

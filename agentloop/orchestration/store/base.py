"""``RunStoreBase``: the public run-lifecycle methods every run store shares, over its primitives.

A run store (:class:`~agentloop.orchestration.store.sql.SqlRunStore`,
:class:`~agentloop.orchestration.store.memory.InMemoryRunStore`) inherits
:meth:`~RunStoreBase.create_run`, :meth:`~RunStoreBase.mark_running`,
:meth:`~RunStoreBase.finish_run` and the counters (:meth:`~RunStoreBase.add_usage`,
:meth:`~RunStoreBase.add_cache_usage`, :meth:`~RunStoreBase.add_tool_calls`) from here: the base
checks every value, builds the new run as one :class:`NewRun` (from the keywords the protocol
takes, so a caller's keyword call is unchanged), and counts the metrics of a first start and of an
end (``orchestration/metrics/``), so a store cannot forget to. The store gives four primitives,
each one atomic step on its storage:

- ``_insert_run(values, owner)``: insert the checked columns, or raise
  :class:`~agentloop.orchestration.errors.RunExistsError` with the stored run;
- ``_mark_running(run_id)``: ``(marked, runnable of a first start or None)``;
- ``_finish_run(asked)`` (a :class:`Finish`): :class:`Ended` when it ended the run now, else
  :class:`Refused` with what the refusal is checked against;
- ``_add_counts(run_id, counts)``: add checked counts to the run's columns at once, their new totals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentloop.orchestration.metrics import record as metrics
from agentloop.orchestration.store.checks import (
    check_count,
    check_finish,
    check_terminal_status,
    error_value,
    new_run_values,
    run_key,
)
from agentloop.orchestration.store.json_values import JsonValue, to_json_value
from agentloop.orchestration.store.protocol import RunOwner, RunRecord
from agentloop.orchestration.store.tables import utcnow

__all__ = ["Ended", "Finish", "NewRun", "Outcome", "Refused", "RunStoreBase", "asked_finish", "settle_finish"]

#: A checked end of a run: its terminal status, stored output and stored error.
Outcome = tuple[str, JsonValue, JsonValue]


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
    """The public lifecycle methods of a run store, their checks and their metrics (module doc)."""

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

    def add_usage(self, run_id: str, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        """Atomically add token usage to the run; returns its new ``(input, output)`` totals."""
        totals = self._add_counts(
            run_id,
            {
                "input_tokens": check_count(input_tokens, "input_tokens"),
                "output_tokens": check_count(output_tokens, "output_tokens"),
            },
        )
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

    # the primitives a store gives

    def _add_counts(self, run_id: str, counts: dict[str, int]) -> dict[str, int]:
        """Add each of ``counts`` (checked, never negative) to the run's column of that name in one
        atomic step; the new totals of those columns. Raises
        :class:`~agentloop.orchestration.errors.RunNotFoundError` for an unknown run."""
        raise NotImplementedError

    def _insert_run(self, values: dict[str, Any], owner: RunOwner | None) -> RunRecord:
        raise NotImplementedError

    def _mark_running(self, run_id: str) -> tuple[bool, str | None]:
        raise NotImplementedError

    def _finish_run(self, asked: Finish) -> Ended | Refused:
        raise NotImplementedError

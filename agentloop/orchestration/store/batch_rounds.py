"""``BatchRounds``: the store steps of a packed batch's runs, gathered per event-loop round.

A batch pack (``celery_adapter/batch_packs.py``) runs its runs side by side on one event loop, and
each run goes through the same steps: its claim (its record and owner read), its start (marked
running), its loop's delivery counted, its loop's result recorded with its events, the events its
end is judged on read, and its end. Each run asks for its step here and awaits it; the steps of
one kind that fall due while the event loop runs one round are made together when that round
ends, with one call of the store's bulk method (``store/bulk.py``: one statement, or one
transaction), as :class:`~agentloop.orchestration.store.pack_writes.PackWrites` writes a
composite pack's checkpoints and results. So a pack of a hundred runs makes a few calls per step,
not a hundred.

A run goes on only once its own step is recorded: it is as durable as it was alone, and a process
that dies between two steps leaves each run where its last step left it (a redelivered pack
claims the run again and goes on from there). A call that fails (the store away) fails each run
that waited on it, with the store's error, and no other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from agentloop.orchestration.store.bulk import LoopEnd, RunEnd, bulk_of
from agentloop.orchestration.store.json_values import JsonValue
from agentloop.orchestration.store.pack_writes import PackWrites
from agentloop.orchestration.store.protocol import RunOwner, RunRecord, RunStore, StartedLoop

__all__ = ["BatchRounds", "Claimed"]

A = TypeVar("A")
V = TypeVar("V")

#: A run's record and its owner, as its claim reads them (``None``: no such run).
Claimed = tuple[RunRecord, RunOwner | None] | None


class _Round(Generic[A, V]):
    """Asks of one kind, made together by ``make`` when the event-loop round they fell due in
    ends: ``make`` answers each ask, in order, with its value or the error it gets alone."""

    def __init__(self, make: Callable[[list[A]], Sequence[V | Exception]]) -> None:
        self.make = make
        self._asks: list[tuple[A, asyncio.Future[V]]] = []

    def __call__(self, ask: A) -> asyncio.Future[V]:
        done: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        if not self._asks:
            asyncio.get_running_loop().call_soon(self._make)
        self._asks.append((ask, done))
        return done

    def _make(self) -> None:
        asks, self._asks = self._asks, []
        try:
            answers = self.make([ask for ask, _ in asks])
        except Exception as error:  # the store away: every run that waited on this call
            for _, done in asks:
                if not done.done():
                    done.set_exception(error)
            return
        for (_, done), answer in zip(asks, answers, strict=True):
            if done.done():  # its run was cancelled meanwhile
                continue
            if isinstance(answer, Exception):
                done.set_exception(answer)
            else:
                done.set_result(answer)


class BatchRounds:
    """The steps of a batch pack's runs on ``store``, each kind made together per event-loop
    round (the module doc); a run's end is judged on its events of ``end_phases``. Each run asks
    for each of its steps once (a pack holds a run id once). Used from one event loop."""

    def __init__(self, store: RunStore, *, end_phases: Sequence[str]) -> None:
        self.store, self.end_phases = store, tuple(end_phases)
        bulk = self.bulk = bulk_of(store)
        self.claim: _Round[str, Claimed] = _Round(self._claims)
        """A run's record and owner (``None``: no such run)."""
        self.mark_running: _Round[str, bool] = _Round(bulk.mark_runs_running)
        """:meth:`~agentloop.orchestration.store.RunStore.mark_running` of a run."""
        self.start_loop: _Round[tuple[str, str], StartedLoop] = _Round(bulk.start_runs_loops)
        """:meth:`~agentloop.orchestration.store.RunStore.start_loops` of a run's loop, ``(run_id, path)``."""
        self.finish_loop: _Round[LoopEnd, JsonValue] = _Round(bulk.finish_runs_loops)
        """:meth:`~agentloop.orchestration.store.RunStore.finish_loop` of a run's loop."""
        self.ends: _Round[str, list[dict[str, Any]]] = _Round(self._ends)
        """The events of ``end_phases`` a run's end is judged on (``WorkflowEngine.finish``)."""
        self.end: _Round[RunEnd, None] = _Round(bulk.finish_runs)
        """:meth:`~agentloop.orchestration.store.RunStore.finish_run` of a run (its refusal raised)."""

    def _claims(self, run_ids: list[str]) -> list[Claimed]:
        found = self.bulk.runs_and_owners(run_ids)
        return [found.get(run_id) for run_id in run_ids]

    def _ends(self, run_ids: list[str]) -> list[list[dict[str, Any]]]:
        found = self.bulk.runs_events(run_ids, phase=self.end_phases)
        return [found[run_id] for run_id in run_ids]

    def writes(self, run_id: str, events: Any) -> PackWrites:
        """Where run ``run_id``'s loop writes: its checkpoints as a pack's (with ``events``, the
        run's publisher, before them), its result with the other runs' due in the round."""
        return _RunWrites(self, run_id, events)


class _RunWrites(PackWrites):
    """One batch run's :class:`PackWrites`: its result goes with the batch's round."""

    def __init__(self, rounds: BatchRounds, run_id: str, events: Any) -> None:
        super().__init__(rounds.store, run_id, events=events)
        self.rounds = rounds

    def finish(
        self,
        path: str,
        result: JsonValue,
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> asyncio.Future[JsonValue]:
        end = LoopEnd(
            run_id=self.run_id,
            path=path,
            result=result,
            events=events,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        return self.rounds.finish_loop(end)

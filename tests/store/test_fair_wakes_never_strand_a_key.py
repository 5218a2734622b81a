"""Fair shares' wakes over every interleaving Hypothesis finds (``store/concurrency.py``), in
memory, on SQLite and on PostgreSQL: keys of weights 2, 1 and 1 arrive, runs end, and each end's
wake sends copies that are delivered in any order, late, among other keys' arrivals and ends.

The invariant: once every copy a wake sent has been delivered, no key with runs waiting holds
fewer slots than its share, since nothing would start them until another run ends (or their
backstop, ten seconds and more later). And a run is never admitted past what its key may hold
at that moment: its share, or more only for the runs admitted before the share shrank."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Engine

from agentloop.orchestration.fairness.shares import share_of
from agentloop.orchestration.store import InMemoryRunStore, RunStore, SqlRunStore
from agentloop.orchestration.store.concurrency import ConcurrencySlots

WEIGHTS = {"C": 2, "D": 1, "E": 1}
EXAMPLES = {"memory": 100, "sqlite": 15, "postgresql": 10}


class FairWakes(RuleBasedStateMachine):
    """The store's slots against a model: which runs hold a slot, wait, or have a copy on its way."""

    store: RunStore
    fair_slots: int

    def __init__(self) -> None:
        super().__init__()
        slots = getattr(self.store, "concurrency")  # noqa: B009 - both stores have one
        assert isinstance(slots, ConcurrencySlots)
        self.slots = slots
        self.key: dict[str, str] = {}
        self.held: set[str] = set()
        self.waiting: set[str] = set()
        self.on_its_way: list[tuple[str, str]] = []  # (run, the copy's token), in sending order

    def work(self) -> dict[str, int]:
        """The weights of the keys with a run holding a slot or waiting."""
        live = self.held | self.waiting
        return {key: WEIGHTS[key] for key in {self.key[run] for run in live}}

    def share(self, key: str) -> int:
        found = share_of(key, self.fair_slots, self.work())
        assert found is not None
        return found

    def holding(self, key: str) -> int:
        return sum(1 for run in self.held if self.key[run] == key)

    def ask(self, run: str, copy: str | None) -> None:
        key = self.key[run]
        before = self.holding(key)
        admission = self.slots.acquire(
            run_id=run,
            key=key,
            limit=None,
            fair_slots=self.fair_slots,
            weight=WEIGHTS[key],
            copy=copy,
            message={"task": "agentloop.launch", "args": [], "kwargs": {"run_id": run}, "task_id": run},
        )
        if admission.admitted:
            assert before < self.share(key), f"{run} of {key} admitted past its share: {before} held"
            self.waiting.discard(run)
            self.held.add(run)
        else:
            self.waiting.add(run)

    @rule(key=st.sampled_from(sorted(WEIGHTS)))
    def arrive(self, key: str) -> None:
        run = f"{key}-{uuid.uuid4().hex[:8]}"
        self.key[run] = key
        self.store.create_run(run_id=run, runnable="r", input=None)
        self.ask(run, None)

    @precondition(lambda self: self.held)
    @rule(pick=st.integers(min_value=0))
    def end(self, pick: int) -> None:
        run = sorted(self.held)[pick % len(self.held)]
        self.store.finish_run(run, status="succeeded", output=None)
        self.held.discard(run)
        for wake in self.slots.wake(fair_slots=self.fair_slots):
            assert wake.run_id in self.waiting, f"woke {wake.run_id}, which does not wait"
            self.on_its_way.append((wake.run_id, uuid.uuid4().hex))

    @precondition(lambda self: self.on_its_way)
    @rule(pick=st.integers(min_value=0))
    def deliver(self, pick: int) -> None:
        run, copy = self.on_its_way.pop(pick % len(self.on_its_way))
        self.ask(run, copy)

    @invariant()
    def no_key_is_stranded(self) -> None:
        if self.on_its_way:
            return  # the copies on their way may start the waiters yet
        for key in sorted({self.key[run] for run in self.waiting}):
            assert self.holding(key) >= self.share(key), (
                f"key {key} waits with {self.holding(key)} of its {self.share(key)} slots held and"
                f" no wake on its way (held {sorted(self.held)}, waiting {sorted(self.waiting)})"
            )


@pytest.mark.parametrize(
    "backend", ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.integration)]
)
@pytest.mark.parametrize("fair_slots", [3, 4])
def test_no_key_waits_below_its_share_with_no_wake_on_its_way(
    backend: str, fair_slots: int, fresh_engine: Callable[[str], Engine]
) -> None:
    class OnThisStore(FairWakes):
        def __init__(self) -> None:
            self.store = InMemoryRunStore() if backend == "memory" else SqlRunStore(fresh_engine(backend))
            self.fair_slots = fair_slots
            super().__init__()

    run_state_machine_as_test(
        OnThisStore,
        settings=settings(
            max_examples=EXAMPLES[backend],
            stateful_step_count=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )

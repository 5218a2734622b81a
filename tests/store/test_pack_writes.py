"""``PackWrites``: the checkpoints and results a pack's loops hand in during one round of the event
loop go to the store in one call each, and each loop waits for its own write (or its error)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.store.pack_writes import PackWrites


class CountingStore(InMemoryRunStore):
    def __init__(self, *, failing: bool = False) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []
        self.failing = failing

    def save_checkpoints(self, run_id: str, checkpoints: Sequence[tuple[str, int, Any]]) -> None:
        self.calls.append(("save_checkpoints", len(checkpoints)))
        if self.failing:
            raise StoreUnavailableError("the database is away", seconds=0.0)
        super().save_checkpoints(run_id, checkpoints)

    def finish_loops(
        self,
        run_id: str,
        results: Sequence[tuple[str, Any]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
        **usage: int,
    ) -> list[Any]:
        self.calls.append(("finish_loops", len(results)))
        return super().finish_loops(run_id, results, events=events, **usage)


def test_the_writes_of_one_round_go_to_the_store_in_one_call_each() -> None:
    store = CountingStore()
    store.finish_loop("r", "b/1", "twin's")

    async def pack() -> list[Any]:
        writes = PackWrites(store, "r")
        await asyncio.gather(*(writes.checkpoint(f"b/{i}", 1, {"n": i}) for i in range(10)))
        return list(await asyncio.gather(*(writes.finish(f"b/{i}", i) for i in range(10))))

    assert asyncio.run(pack()) == [0, "twin's", *range(2, 10)]
    assert store.calls == [("save_checkpoints", 10), ("finish_loops", 10)]
    assert store.loop_record("r", "b/7") == (True, 7, (1, {"n": 7}))


def test_a_failed_write_fails_every_loop_that_waited_on_it() -> None:
    store = CountingStore(failing=True)

    async def pack() -> list[Any]:
        writes = PackWrites(store, "r")
        return list(
            await asyncio.gather(
                *(writes.checkpoint(f"b/{i}", 1, {}) for i in range(3)), return_exceptions=True
            )
        )

    outcomes = asyncio.run(pack())
    assert len(outcomes) == 3 and all(isinstance(outcome, StoreUnavailableError) for outcome in outcomes)
    assert store.calls == [("save_checkpoints", 3)]


def test_a_loop_goes_on_only_once_its_checkpoint_is_recorded() -> None:
    store = CountingStore()

    async def loop() -> Any:
        writes = PackWrites(store, "r")
        waiting = writes.checkpoint("b/0", 4, {"n": 4})
        assert store.loop_record("r", "b/0").checkpoint is None  # not written before the round ends
        await waiting
        return store.loop_record("r", "b/0").checkpoint

    assert asyncio.run(loop()) == (4, {"n": 4})


@pytest.mark.parametrize("size", [1, 50])
def test_each_loop_gets_its_own_result_back(size: int) -> None:
    store = CountingStore()

    async def pack() -> list[Any]:
        writes = PackWrites(store, "r")
        return list(await asyncio.gather(*(writes.finish(f"b/{i}", {"i": i}) for i in range(size))))

    assert asyncio.run(pack()) == [{"i": i} for i in range(size)]

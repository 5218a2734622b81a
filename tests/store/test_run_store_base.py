"""The run stores' shared base: a :class:`NewRun` value records the same run as ``create_run``'s
keywords, and a store that gives only the primitives gets the checks and the metrics counted."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.store.base import Ended, Finish, NewRun, Refused, RunStoreBase
from agentloop.orchestration.store.protocol import RunOwner, RunRecord


def test_a_new_run_value_records_what_the_keywords_record() -> None:
    store = InMemoryRunStore()
    owner = RunOwner(launch_digest="d", token="t")

    by_keywords = store.create_run(
        run_id="a", runnable="r", input={"x": 1}, path="0", token_budget=5, owner=owner
    )
    by_value = store.insert_run(
        NewRun(run_id="b", runnable="r", input={"x": 1}, path="0", token_budget=5, owner=owner)
    )

    def same(record: RunRecord) -> tuple[Any, ...]:
        return (record.runnable, record.input, record.path, record.token_budget, record.status)

    assert same(by_keywords) == same(by_value) == ("r", {"x": 1}, "0", 5, "pending")
    assert store.run_owner("b") == owner


class PrimitivesOnly(RunStoreBase):
    """A third store: it gives the primitives and nothing else."""

    def __init__(self) -> None:
        self.inserted: list[dict[str, Any]] = []

    def _insert_run(self, values: dict[str, Any], owner: RunOwner | None) -> RunRecord:
        self.inserted.append(values)
        return RunRecord(**values)

    def _mark_running(self, run_id: str) -> tuple[bool, str | None]:
        return True, "third.runnable"

    def _finish_run(self, asked: Finish) -> Ended | Refused:
        return Ended("third.runnable", asked.ended)


def test_a_store_of_primitives_gets_the_checks_and_counts_starts_and_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted: list[tuple[str, ...]] = []
    recorder = SimpleNamespace(
        run_started=lambda runnable: counted.append(("started", runnable)),
        run_ended=lambda runnable, status, started, ended: counted.append(("ended", runnable, status)),
    )
    monkeypatch.setattr("agentloop.orchestration.store.base.metrics", recorder)
    store = PrimitivesOnly()

    with pytest.raises(ValueError, match="run path"):
        store.create_run(run_id="a", runnable="r", input=None, path="x" * 100_000)
    with pytest.raises(ValueError):
        store.finish_run("a", status="not-a-status")
    store.create_run(run_id="a", runnable="r", input=None)
    store.mark_running("a")
    store.finish_run("a", status="succeeded", output=1)

    assert [values["id"] for values in store.inserted] == ["a"]
    assert counted == [("started", "third.runnable"), ("ended", "third.runnable", "succeeded")]

"""The run stores' shared base: a :class:`NewRun` value records the same run as ``create_run``'s
keywords, and a store that gives only the primitives gets the checks and the metrics counted."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentloop.orchestration.store import InMemoryRunStore, RunStore, SqlRunStore
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


def _primitives_without_default() -> set[str]:
    """The primitives the base leaves to a store: its ``_`` methods that only raise."""
    return {
        name
        for name, member in vars(RunStoreBase).items()
        if name.startswith("_")
        and not name.startswith("__")
        and callable(member)
        and "raise NotImplementedError" in inspect.getsource(member)
    }


def test_every_store_gives_every_primitive_and_the_guide_names_them() -> None:
    primitives = _primitives_without_default()
    guide = (Path(__file__).parents[2] / "docs" / "development.md").read_text()

    assert len(primitives) == 18
    for store in (SqlRunStore, InMemoryRunStore):
        assert {name for name in primitives if getattr(store, name) is getattr(RunStoreBase, name)} == set()
    assert {name for name in primitives if f"`{name}" not in guide} == set()


def test_the_public_surface_is_the_base_s_alone() -> None:
    """No store spells a public method of the protocol again: each is the base's, over primitives."""
    public = {name for name in vars(RunStore) if not name.startswith("_")}
    for store in (SqlRunStore, InMemoryRunStore):
        spelled = {name for name in public if name in vars(store)}
        assert spelled == set(), store


class Untouched(PrimitivesOnly):
    """A store whose every read or write fails the test: the base must answer without it."""

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_") and not name.startswith("__"):

            def asked(*args: Any, **kwargs: Any) -> Any:
                raise AssertionError(f"the base asked the store's {name}")

            return asked
        return super().__getattribute__(name)


@pytest.mark.parametrize(
    "call",
    [
        lambda store: store.events("r", limit=-1),
        lambda store: store.list_runs(limit=-1),
        lambda store: store.list_runs(offset=True),
        lambda store: store.finish_loop("r", "0", None, input_tokens=-1),
        lambda store: store.finish_loops("r", [("0", None)], output_tokens=1.5),
        lambda store: store.save_checkpoint("r", "0", -1, None),
        lambda store: store.save_checkpoints("r", [("0", 2**40, None)]),
        lambda store: store.add_usage("r", -1, 0),
    ],
    ids=["events", "list-limit", "list-offset", "finish-loop", "finish-loops", "save", "saves", "usage"],
)
def test_a_value_no_column_holds_is_refused_before_the_store_is_asked(call: Any) -> None:
    with pytest.raises(ValueError):
        call(Untouched())


def test_what_needs_no_storage_is_answered_without_it() -> None:
    store = Untouched()
    unstorable = "x" * 1000

    assert store.get_run(unstorable) is None
    assert store.events(unstorable) == []
    assert store.is_cancel_requested("nul\x00") is False
    store.append_events("r", [])
    store.save_checkpoints("r", [], events=[])
    assert store.finish_loops("r", []) == []

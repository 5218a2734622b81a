"""The bulk steps of a packed batch's runs (``store/bulk.py``) on every store: each run's step as
its single-run method makes it (created or left, marked or not, a first loop result stands, an
ended run is never rewritten, an owned run ends only with its token), many runs in one call."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop.orchestration.errors import RunAlreadyEndedError, RunOwnershipError
from agentloop.orchestration.store import RunOwner, RunStore
from agentloop.orchestration.store.base import NewRun
from agentloop.orchestration.store.bulk import BulkRunStoreBase, LoopEnd, RunEnd, bulk_of

IDS = [f"r{index}" for index in range(4)]


def _done(path: str = "") -> dict[str, Any]:
    return {"path": path, "runnable": "L", "iteration": 1, "max_iterations": 2, "phase": "done",
            "status": "completed", "message": "", "data": {}, "at": 1.0}  # fmt: skip


@pytest.fixture
def bulk(run_store: RunStore) -> BulkRunStoreBase:
    store = bulk_of(run_store)
    owners = {run_id: RunOwner.new(f"digest-{run_id}") for run_id in IDS}
    assert store.insert_runs(
        [NewRun(run_id=run_id, runnable="L", input=1, owner=owners[run_id]) for run_id in IDS]
    )
    return store


def test_runs_are_inserted_unless_their_id_exists_and_read_with_their_owners(bulk: BulkRunStoreBase) -> None:
    assert bulk.insert_runs(
        [NewRun(run_id="r0", runnable="other", input=2), NewRun(run_id="r9", runnable="L", input=3)]
    ) == [
        False,
        True,
    ]
    found = bulk.runs_and_owners(["r0", "r9", "unknown"])
    assert set(found) == {"r0", "r9"}
    record, owner = found["r0"]
    assert (record.runnable, record.input, record.status) == ("L", 1, "pending")  # left as it was
    assert owner is not None and owner.launch_digest == "digest-r0"
    assert found["r9"][1] is None


def test_runs_are_marked_running_but_an_ended_one(bulk: BulkRunStoreBase) -> None:
    owner = bulk.runs_and_owners(["r1"])["r1"][1]
    assert owner is not None
    bulk.finish_run("r1", status="failed", error={"type": "X", "message": "x"}, owner_token=owner.token)

    assert bulk.mark_runs_running(["r0", "r1", "unknown"]) == [True, False, False]
    first = bulk.get_run("r0")
    assert first is not None and first.status == "running" and first.started_at is not None
    assert bulk.mark_runs_running(["r0"]) == [True]
    again = bulk.get_run("r0")
    assert again is not None and again.started_at == first.started_at  # its first start kept


def test_loops_of_several_runs_start_and_finish_together_and_a_first_result_stands(
    bulk: BulkRunStoreBase,
) -> None:
    loops = [("r0", ""), ("r1", ""), ("r1", "branch/a")]
    assert [started.deliveries for started in bulk.start_runs_loops(loops)] == [1, 1, 1]
    assert [started.deliveries for started in bulk.start_runs_loops(loops[:1])] == [2]

    ends = [
        LoopEnd(run_id="r0", path="", result={"v": 0}, events=[_done()], input_tokens=3, output_tokens=4),
        LoopEnd(run_id="r1", path="branch/a", result=None, events=[_done("branch/a")]),
    ]
    assert bulk.finish_runs_loops(ends) == [{"v": 0}, None]
    assert bulk.finish_runs_loops([LoopEnd(run_id="r0", path="", result={"v": "late"})]) == [{"v": 0}]

    (started,) = bulk.start_runs_loops([("r0", "")])
    assert started.record.finished and started.record.result == {"v": 0}
    record = bulk.get_run("r0")
    assert record is not None and (record.input_tokens, record.output_tokens) == (3, 4)
    read = bulk.runs_events(["r0", "r1", "r2"], phase=["done"])
    assert [event["path"] for event in read["r0"]] == [""]
    assert [event["path"] for event in read["r1"]] == ["branch/a"]
    assert read["r2"] == []


def test_runs_end_together_each_only_once_and_only_with_its_owners_token(bulk: BulkRunStoreBase) -> None:
    tokens = {run_id: owner.token for run_id, (_, owner) in bulk.runs_and_owners(IDS).items() if owner}
    answers = bulk.finish_runs(
        [
            RunEnd(
                run_id="r0",
                status="succeeded",
                output={"o": 0},
                owner_token=tokens["r0"],
                stopped_by="complete",
            ),
            RunEnd(
                run_id="r1", status="succeeded", output=None, owner_token=tokens["r1"], stopped_by="bound"
            ),
            RunEnd(run_id="r2", status="succeeded", output=2, owner_token="not its token"),
        ]
    )
    assert answers[:2] == [None, None] and isinstance(answers[2], RunOwnershipError)
    ended = bulk.get_run("r0")
    assert ended is not None and (ended.status, ended.output, ended.stopped_by) == (
        "succeeded",
        {"o": 0},
        "complete",
    )
    second = bulk.get_run("r1")
    assert second is not None and (second.output, second.stopped_by) == (None, "bound")
    assert bulk.get_run("r2").status == "pending"  # type: ignore[union-attr]

    (again,) = bulk.finish_runs(
        [RunEnd(run_id="r0", status="failed", error=ValueError("late"), owner_token=tokens["r0"])]
    )
    assert isinstance(again, RunAlreadyEndedError)
    kept = bulk.get_run("r0")
    assert kept is not None and (kept.status, kept.finished_at) == ("succeeded", ended.finished_at)

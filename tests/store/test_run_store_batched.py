"""The writes a task batches: several events in one transaction, a loop's result with its
events, and a loop's whole record read at once; on every store implementation."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from agentloop.orchestration.store import LoopRecord, RunStore, SqlRunStore


def event(path: str, n: int) -> dict[str, object]:
    return {"run_id": "r", "path": path, "runnable": "L", "iteration": n, "max_iterations": 9,
            "phase": "iteration", "status": "progress", "message": "", "data": {}, "at": 1.0}  # fmt: skip


def test_several_events_are_appended_in_order(run_store: RunStore) -> None:
    run_store.append_events("r", [event("a", 0)])
    run_store.append_events("r", [event("a", 1), event("b", 2), event("a", 3)])
    run_store.append_events("r", [])
    assert [(e["path"], e["iteration"]) for _, e in run_store.events("r")] == [
        ("a", 0), ("a", 1), ("b", 2), ("a", 3),
    ]  # fmt: skip


def test_a_loop_record_is_read_whole(run_store: RunStore) -> None:
    assert run_store.loop_record("r", "p") == LoopRecord(finished=False, result=None, checkpoint=None)
    run_store.save_checkpoint("r", "p", 2, {"n": 2})
    assert run_store.loop_record("r", "p") == (False, None, (2, {"n": 2}))
    run_store.finish_loop("r", "p", {"done": True}, events=[event("p", 3)])
    assert run_store.loop_record("r", "p") == (True, {"done": True}, (2, {"n": 2}))
    assert [e["iteration"] for _, e in run_store.events("r")] == [3]


def test_finishing_a_loop_without_events_records_its_result(run_store: RunStore) -> None:
    run_store.finish_loop("r", "q", [1, 2])
    assert run_store.loop_record("r", "q") == (True, [1, 2], None)
    assert run_store.events("r") == []


def test_a_packs_checkpoints_are_saved_together_and_a_finished_loop_keeps_its_record(
    run_store: RunStore,
) -> None:
    run_store.finish_loop("r", "done", "kept")
    run_store.save_checkpoints("r", [("a", 1, {"n": 1}), ("b", 2, {"n": 2}), ("done", 5, {"n": 5})])
    run_store.save_checkpoints("r", [("a", 3, {"n": 3})])
    run_store.save_checkpoints("r", [])

    assert run_store.loop_record("r", "a") == (False, None, (3, {"n": 3}))
    assert run_store.loop_record("r", "b") == (False, None, (2, {"n": 2}))
    assert run_store.loop_record("r", "done") == (True, "kept", None)


def test_checkpoints_are_saved_with_the_usage_of_the_calls_before_them(run_store: RunStore) -> None:
    """The usage a task has not written yet goes with its checkpoints, in the same step: a process
    killed after a checkpoint has counted every model call before it (with events, or a
    ``failed`` one: PostgreSQL's statement, and its transaction)."""
    run_store.create_run(run_id="r", runnable="L", input=None)
    run_store.save_checkpoints("r", [("a", 1, {"n": 1})], input_tokens=5, output_tokens=11)
    run_store.save_checkpoints(
        "r",
        [("a", 2, {"n": 2}), ("b", 1, {"n": 1})],
        events=[event("a", 1)],
        input_tokens=10,
        output_tokens=22,
    )
    failed = {**event("b", 1), "status": "failed"}
    run_store.save_checkpoints("r", [("b", 2, {"n": 2})], events=[failed], input_tokens=5, output_tokens=11)
    run_store.save_checkpoints("r", [], input_tokens=1, output_tokens=0)  # usage alone
    run_store.save_checkpoints("elsewhere", [("a", 1, None)], input_tokens=5, output_tokens=11)  # no run

    record = run_store.get_run("r")
    assert record is not None and (record.input_tokens, record.output_tokens) == (21, 44)
    assert run_store.loop_record("r", "a") == (False, None, (2, {"n": 2}))
    assert run_store.loop_record("r", "b") == (False, None, (2, {"n": 2}))
    with pytest.raises(ValueError, match="input_tokens"):
        run_store.save_checkpoints("r", [("a", 3, None)], input_tokens=-1)


def test_a_packs_results_are_recorded_together_and_each_first_result_stands(run_store: RunStore) -> None:
    run_store.create_run(run_id="r", runnable="fan", input=None)
    run_store.save_checkpoint("r", "a", 2, {"n": 2})
    run_store.finish_loop("r", "b", {"first": True})

    recorded = run_store.finish_loops(
        "r",
        [("a", [1]), ("b", {"second": True}), ("c", None)],
        events=[event("a", 3), event("c", 1)],
        input_tokens=5,
        output_tokens=2,
    )

    assert recorded == [[1], {"first": True}, None]  # in order; b's twin result stands
    assert run_store.loop_record("r", "a") == (True, [1], (2, {"n": 2}))
    assert run_store.loop_record("r", "c") == (True, None, None)
    assert [(e["path"], e["iteration"]) for _, e in run_store.events("r")] == [("a", 3), ("c", 1)]
    record = run_store.get_run("r")
    assert record is not None and (record.input_tokens, record.output_tokens) == (5, 2)
    assert run_store.finish_loops("r", []) == []


def test_events_are_read_by_phase_and_status_without_the_others(run_store: RunStore) -> None:
    """What a run's end reads (its model failures, its failed levels) among thousands of events."""
    outage = {**event("a", 1), "phase": "model_unavailable", "data": {"reason": "down"}}
    failed = {**event("b", 2), "status": "failed"}
    run_store.append_events("r", [event("a", 0), outage, failed, event("b", 3), {**outage, "iteration": 4}])

    by_phase = run_store.events("r", phase="model_unavailable")
    assert [(e["path"], e["iteration"]) for _, e in by_phase] == [("a", 1), ("a", 4)]
    assert by_phase[0][1]["data"] == {"reason": "down"}
    assert [(e["path"], e["iteration"]) for _, e in run_store.events("r", status="failed")] == [("b", 2)]
    assert run_store.events("r", phase="model_unavailable", status="failed") == []
    after = by_phase[0][0]
    later = run_store.events("r", phase="model_unavailable", after_id=after)
    assert [e["iteration"] for _, e in later] == [4]
    # several phases in one read (a run's end reads its failures and its loops' ends together)
    either = run_store.events("r", phase=("model_unavailable", "iteration"))
    assert [(e["phase"], e["iteration"]) for _, e in either] == [
        ("iteration", 0),
        ("model_unavailable", 1),
        ("iteration", 2),
        ("iteration", 3),
        ("model_unavailable", 4),
    ]
    assert run_store.events("r", phase=()) == []


def test_checkpoints_are_saved_with_the_events_before_them_and_a_level_fails_once(
    run_store: RunStore,
) -> None:
    failed = {**event("", 0), "status": "failed", "phase": "error"}
    run_store.append_events("r", [failed])

    run_store.save_checkpoints("r", [("a", 1, {"n": 1})], events=[event("a", 0), event("a", 1), failed])
    run_store.save_checkpoints("r", [], events=[event("b", 0)])

    stored = [(e["path"], e["iteration"], e["status"]) for _, e in run_store.events("r")]
    assert stored == [("", 0, "failed"), ("a", 0, "progress"), ("a", 1, "progress"), ("b", 0, "progress")]
    assert run_store.loop_record("r", "a") == (False, None, (1, {"n": 1}))


def test_a_packs_loop_records_are_read_together_in_their_order(run_store: RunStore) -> None:
    run_store.save_checkpoint("r", "branch/1", 2, {"n": 2})
    run_store.finish_loop("r", "branch/2", {"done": True})
    paths = [f"branch/{index}" for index in range(1_200)]  # more than one read's worth

    records = run_store.loop_records("r", paths)

    assert len(records) == 1_200
    assert records[1] == (False, None, (2, {"n": 2}))
    assert records[2] == (True, {"done": True}, None)
    assert records[0] == records[1_199] == (False, None, None)
    assert run_store.loop_records("r", ["branch/2", "branch/1"]) == [records[2], records[1]]
    assert run_store.loop_records("r", []) == []


def test_checkpoints_that_fail_to_save_leave_no_failed_event_of_theirs(sql_engine: Engine) -> None:
    """A failed event goes in with its checkpoints or not at all: one transaction, on PostgreSQL too
    (where a batch with a failure once ran in autocommit, each statement its own transaction)."""
    store = SqlRunStore(sql_engine)
    store._upserts = replace(
        store._upserts, save_checkpoint=text("INSERT INTO no_such_table VALUES (1)")
    )  # the checkpoint's write fails
    failed = {**event("a", 1), "status": "failed", "phase": "error"}

    with pytest.raises(DBAPIError):
        store.save_checkpoints("r", [("a", 1, {"n": 1})], events=[event("a", 0), failed])

    assert store.events("r") == []

"""Every run store keeps the same promises: in memory, on SQLite and on PostgreSQL."""

from __future__ import annotations

import inspect
import threading
import time
from typing import Any

import pytest
from sqlalchemy import Engine, select

from agentloop.actions import StateNotSerializableError
from agentloop.orchestration.errors import RunAlreadyEndedError, RunExistsError, RunNotFoundError
from agentloop.orchestration.store import (
    TERMINAL_STATUSES,
    LoopRecord,
    RunRecord,
    RunStatus,
    RunStore,
    SqlRunStore,
)
from agentloop.orchestration.store.tables import checkpoints


def _event(path: str, iteration: int, status: str = "progress", **data: Any) -> dict[str, Any]:
    return {
        "run_id": "root",
        "path": path,
        "runnable": "demo",
        "iteration": iteration,
        "max_iterations": 10,
        "phase": "advance",
        "status": status,
        "message": f"{path} #{iteration}",
        "data": data,
        "at": 1_700_000_000.5 + iteration,
    }


def _protocol_methods() -> list[str]:
    return sorted(
        name for name, member in vars(RunStore).items() if callable(member) and not name.startswith("_")
    )


def test_every_store_takes_every_call_of_the_protocol_as_the_protocol_spells_it(run_store: RunStore) -> None:
    # isinstance() of a runtime protocol only checks that the names exist; a caller written against
    # the protocol also needs each parameter's name, kind and default (extra ones only optional)
    assert isinstance(run_store, RunStore)
    assert len(_protocol_methods()) >= 15
    for name in _protocol_methods():
        promised = inspect.signature(getattr(RunStore, name)).parameters
        given = inspect.signature(getattr(type(run_store), name)).parameters
        for parameter in promised.values():
            assert parameter.name in given, f"{name}() has no parameter {parameter.name!r}"
            actual = given[parameter.name]
            assert (actual.kind, actual.default) == (parameter.kind, parameter.default), f"{name}({actual})"
        extra = [p for p in given.values() if p.name not in promised]
        optional = all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in extra)
        assert optional, f"{name}() adds a required parameter"


def test_a_run_goes_from_pending_to_running_to_succeeded(run_store: RunStore) -> None:
    created = run_store.create_run(run_id="r1", runnable="search", input={"query": "maps"}, token_budget=500)
    assert created.status == RunStatus.PENDING
    assert created.is_root and created.root_run_id == "r1" and created.parent_run_id is None
    assert created.input == {"query": "maps"}
    assert (created.input_tokens, created.output_tokens, created.token_budget) == (0, 0, 500)
    assert created.created_at.tzinfo is not None
    assert created.started_at is None and created.finished_at is None

    assert run_store.mark_running("r1") is True
    running = run_store.get_run("r1")
    assert running is not None and running.status == "running" and running.started_at is not None

    run_store.finish_run("r1", status="succeeded", output={"records": [1, 2]})
    finished = run_store.get_run("r1")
    assert finished is not None
    assert finished.status == "succeeded" and finished.is_finished
    assert finished.output == {"records": [1, 2]} and finished.error is None
    assert finished.finished_at is not None and finished.finished_at >= running.started_at
    assert finished.started_at == running.started_at


def test_a_run_that_returned_keeps_how_it_ended(run_store: RunStore) -> None:
    for run_id, stopped_by in (("bounded", "bound"), ("complete", "complete")):
        run_store.create_run(run_id=run_id, runnable="search", input=None)
        run_store.finish_run(run_id, status="succeeded", output=10, stopped_by=stopped_by)
    run_store.create_run(run_id="failed", runnable="search", input=None)
    run_store.finish_run("failed", status="failed", error=ValueError("bad input"))

    ended = {run_id: run_store.get_run(run_id) for run_id in ("bounded", "complete", "failed")}

    assert {run_id: record.stopped_by for run_id, record in ended.items() if record is not None} == {
        "bounded": "bound",
        "complete": "complete",
        "failed": None,
    }
    assert ended["bounded"] is not None and ended["bounded"].to_dict()["stopped_by"] == "bound"
    assert [r.stopped_by for r in run_store.list_runs(limit=3) if r.id == "bounded"] == ["bound"]


def test_a_failed_run_keeps_its_error(run_store: RunStore) -> None:
    run_store.create_run(run_id="r1", runnable="search", input=None)
    run_store.finish_run("r1", status="failed", error=ValueError("bad input"))
    record = run_store.get_run("r1")
    assert record is not None and record.input is None
    assert record.error == {"type": "ValueError", "message": "bad input"}
    with pytest.raises(RunAlreadyEndedError, match="already ended"):
        run_store.finish_run("r1", status=RunStatus.BUDGET_EXCEEDED, error={"type": "Budget"})
    assert run_store.get_run("r1") == record


def test_finishing_needs_a_terminal_status(run_store: RunStore) -> None:
    run_store.create_run(run_id="r1", runnable="search", input={})
    for status in ("running", "pending", "done"):
        with pytest.raises(ValueError, match="does not end a run"):
            run_store.finish_run("r1", status=status)
    ended = {"succeeded", "degraded", "failed", "cancelled", "deadline_exceeded", "budget_exceeded"}
    assert ended == TERMINAL_STATUSES


def test_a_finished_run_is_not_marked_running_again(run_store: RunStore) -> None:
    run_store.create_run(run_id="r1", runnable="search", input={})
    run_store.mark_running("r1")
    first_start = run_store.get_run("r1").started_at  # type: ignore[union-attr]
    assert run_store.mark_running("r1") is True
    assert run_store.get_run("r1").started_at == first_start  # type: ignore[union-attr]
    run_store.finish_run("r1", status="cancelled")
    assert run_store.mark_running("r1") is False
    assert run_store.get_run("r1").status == "cancelled"  # type: ignore[union-attr]


def test_creating_an_existing_run_is_refused_and_leaves_it_unchanged(run_store: RunStore) -> None:
    first = run_store.create_run(run_id="r1", runnable="search", input={"v": 1}, celery_task_id="t1")
    run_store.mark_running("r1")
    with pytest.raises(RunExistsError, match="'r1' is taken by a run of 'search' \\(running\\)") as refused:
        run_store.create_run(run_id="r1", runnable="other", input={"v": 2}, celery_task_id="t2")
    again = refused.value.record
    assert again.runnable == "search" and again.input == {"v": 1} and again.celery_task_id == "t1"
    assert again.status == "running"
    assert again.created_at == first.created_at
    assert [record.id for record in run_store.list_runs()] == ["r1"]


def test_a_child_run_points_at_its_root_and_parent(run_store: RunStore) -> None:
    run_store.create_run(run_id="root", runnable="pipeline", input={})
    child = run_store.create_run(
        run_id="child",
        runnable="stage",
        input={},
        root_run_id="root",
        parent_run_id="root",
        path="pipeline/1",
    )
    assert (child.root_run_id, child.parent_run_id, child.path) == ("root", "root", "pipeline/1")
    assert not child.is_root


def test_unknown_runs_are_reported_by_id(run_store: RunStore) -> None:
    assert run_store.get_run("ghost") is None
    assert run_store.is_cancel_requested("ghost") is False
    for call in (
        lambda: run_store.mark_running("ghost"),
        lambda: run_store.finish_run("ghost", status="failed"),
        lambda: run_store.request_cancel("ghost"),
        lambda: run_store.add_usage("ghost", 1, 1),
    ):
        with pytest.raises(RunNotFoundError, match="'ghost'"):
            call()


def test_list_runs_shows_the_newest_first_and_filters_by_status(run_store: RunStore) -> None:
    for index in range(5):
        run_store.create_run(run_id=f"r{index}", runnable="search", input={"i": index})
        time.sleep(0.002)
    run_store.finish_run("r1", status="failed")
    run_store.finish_run("r3", status="failed")
    assert [record.id for record in run_store.list_runs()] == ["r4", "r3", "r2", "r1", "r0"]
    assert [record.id for record in run_store.list_runs(limit=2)] == ["r4", "r3"]
    assert [record.id for record in run_store.list_runs(status="failed")] == ["r3", "r1"]
    assert run_store.list_runs(status="succeeded") == []
    assert [record.id for record in run_store.list_runs(limit=2, offset=1)] == ["r3", "r2"]
    assert [record.id for record in run_store.list_runs(status="failed", offset=1)] == ["r1"]
    assert run_store.list_runs(offset=5) == []
    with pytest.raises(ValueError, match="offset"):
        run_store.list_runs(offset=-1)


def test_a_run_keeps_the_principal_that_started_it_and_lists_filter_by_it(run_store: RunStore) -> None:
    for run_id, principal in (("a", "shop"), ("b", None), ("c", "shop"), ("d", "other")):
        run_store.create_run(run_id=run_id, runnable="search", input=None, principal=principal)
        time.sleep(0.002)
    run_store.finish_run("c", status="succeeded", output=1)

    assert [run_store.get_run(run_id).principal for run_id in "abcd"] == ["shop", None, "shop", "other"]
    assert [record.id for record in run_store.list_runs(principal="shop")] == ["c", "a"]
    assert [record.id for record in run_store.list_runs(principal="other", status="pending")] == ["d"]
    assert [record.id for record in run_store.list_runs()] == ["d", "c", "b", "a"]
    assert RunRecord.from_dict(run_store.get_run("a").to_dict()).principal == "shop"
    with pytest.raises(ValueError, match="principal"):
        run_store.create_run(run_id="e", runnable="search", input=None, principal="x" * 256)


def test_events_follow_a_whole_workflow_in_order_across_paths(run_store: RunStore) -> None:
    sent = [
        _event("", 0, "started"),
        _event("pipeline/0", 1),
        _event("pipeline/1/branch/0", 1),
        _event("pipeline/1/branch/1", 1),
        _event("pipeline/1/branch/0", 2, hits=3),
        _event("", 1, "completed"),
    ]
    run_store.append_events("root", sent[:2])
    run_store.append_events("other-root", [_event("", 0)])
    run_store.append_events("root", sent[2:])

    stored = run_store.events("root")
    ids = [event_id for event_id, _ in stored]
    assert ids == sorted(set(ids))
    assert [event for _, event in stored] == sent

    assert [event for _, event in run_store.events("root", after_id=ids[2])] == sent[3:]
    assert [event for _, event in run_store.events("root", after_id=ids[1], limit=2)] == sent[2:4]
    assert run_store.events("root", after_id=ids[-1]) == []
    assert run_store.events("nobody") == []


def test_a_run_s_end_events_are_its_model_failures_and_its_loops_stopped_at_their_bound(
    run_store: RunStore,
) -> None:
    def event(path: str, phase: str, status: str, data: Any) -> dict[str, Any]:
        return {"path": path, "phase": phase, "status": status, "data": data}

    judged = [
        event("s/1", "model_unavailable", "progress", {"action": "plan", "reason": "down"}),
        event("s/2", "done", "completed", {"stopped_by": "bound"}),
    ]
    others = [
        event("s/0", "done", "completed", {"stopped_by": "complete"}),
        event("s/3", "done", "completed", {"stopped_by": {"nested": "bound"}}),
        event("s/4", "done", "completed", {}),
        event("s/5", "done", "completed", None),
        event("s/6", "iteration", "progress", {"stopped_by": "bound"}),
        event("", "done", "completed", {"width": 7}),
    ]
    run_store.append_events("root", [others[0], judged[0], *others[1:3], judged[1], *others[3:]])
    run_store.append_events("other-root", judged)

    assert [event for _, event in run_store.run_end_events("root")] == judged
    assert run_store.run_end_events("nobody") == []


def test_events_must_be_json_objects_and_none_is_kept_when_one_is_not(run_store: RunStore) -> None:
    with pytest.raises(StateNotSerializableError, match="progress event"):
        run_store.append_events("root", [_event("", 0), {**_event("", 1), "data": {"when": object()}}])
    with pytest.raises(TypeError, match="a progress event is a mapping, not list"):
        run_store.append_events("root", [_event("", 0), ["not", "an", "event"]])  # type: ignore[list-item]
    assert run_store.events("root") == []


def test_cancelling_any_run_of_a_workflow_is_seen_from_every_run_of_it(run_store: RunStore) -> None:
    run_store.create_run(run_id="root", runnable="composite", input={})
    run_store.create_run(run_id="a", runnable="branch", input={}, root_run_id="root", parent_run_id="root")
    run_store.create_run(run_id="b", runnable="branch", input={}, root_run_id="root", parent_run_id="root")
    run_store.create_run(run_id="elsewhere", runnable="branch", input={})
    assert not any(run_store.is_cancel_requested(run_id) for run_id in ("root", "a", "b"))

    run_store.request_cancel("a")
    assert all(run_store.is_cancel_requested(run_id) for run_id in ("root", "a", "b"))
    assert run_store.is_cancel_requested("elsewhere") is False
    assert run_store.get_run("root").cancel_requested is True  # type: ignore[union-attr]


def test_usage_adds_up_and_is_returned(run_store: RunStore) -> None:
    run_store.create_run(run_id="r1", runnable="search", input={})
    assert run_store.add_usage("r1", 100, 20) == (100, 20)
    assert run_store.add_usage("r1", 5, 0) == (105, 20)
    record = run_store.get_run("r1")
    assert record is not None
    assert (record.input_tokens, record.output_tokens, record.total_tokens) == (105, 20, 125)
    with pytest.raises(ValueError, match="input_tokens"):
        run_store.add_usage("r1", -1, 0)


def test_usage_from_many_threads_is_never_lost(run_store: RunStore) -> None:
    run_store.create_run(run_id="r1", runnable="search", input={})

    def spend() -> None:
        for _ in range(25):
            run_store.add_usage("r1", 1, 2)

    threads = [threading.Thread(target=spend) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert run_store.add_usage("r1", 0, 0) == (100, 200)


def test_a_checkpoint_is_replaced_by_the_next_one(run_store: RunStore) -> None:
    assert run_store.loop_record("r1", "loop").checkpoint is None
    for iteration in range(1, 31):
        state = {"seen": list(range(iteration))[-3:], "i": iteration}
        run_store.save_checkpoint("r1", "loop", iteration, state)
    run_store.save_checkpoint("r1", "pipeline/1/loop", 2, ["other", "loop"])
    assert run_store.loop_record("r1", "loop").checkpoint == (30, {"seen": [27, 28, 29], "i": 30})
    assert run_store.loop_record("r1", "pipeline/1/loop").checkpoint == (2, ["other", "loop"])
    assert run_store.loop_record("r2", "loop").checkpoint is None


def test_a_sql_store_keeps_one_checkpoint_row_per_loop(sql_engine: Engine) -> None:
    store = SqlRunStore(sql_engine)
    for iteration in range(5):
        store.save_checkpoint("r1", "loop", iteration, {"i": iteration})
    store.finish_loop("r1", "loop", None)
    store.save_checkpoint("r1", "other", 0, None)
    with sql_engine.connect() as connection:
        paths = connection.execute(select(checkpoints.c.path).order_by(checkpoints.c.path)).scalars()
        assert list(paths) == ["loop", "other"]


def test_checkpoint_state_round_trips_as_json(run_store: RunStore) -> None:
    state = {"history": ({"role": "user", "content": "é ✓"},), "score": 0.25, "done": False, "none": None}
    run_store.save_checkpoint("r1", "loop", 0, state)
    assert run_store.loop_record("r1", "loop").checkpoint == (
        0,
        {"history": [{"role": "user", "content": "é ✓"}], "score": 0.25, "done": False, "none": None},
    )
    run_store.save_checkpoint("r1", "loop", 1, None)
    assert run_store.loop_record("r1", "loop").checkpoint == (1, None)


@pytest.mark.parametrize(
    ("state", "named"),
    [
        ({"items": {1, 2}}, "value['items'] is of type builtins.set"),
        ({"when": time}, "value['when'] is of type builtins.module"),
        ({"nested": [1, [2, b"raw"]]}, "value['nested'][1][1] is of type builtins.bytes"),
        ({1: "int key"}, "has a key 1 of type int"),
        ({"x": float("inf")}, "JSON has no NaN/Infinity"),
    ],
)
def test_state_that_is_not_json_is_refused_naming_the_offending_type(
    run_store: RunStore, state: Any, named: str
) -> None:
    with pytest.raises(StateNotSerializableError) as raised:
        run_store.save_checkpoint("r1", "pipeline/loop", 3, state)
    message = str(raised.value)
    assert named in message
    assert "checkpoint state of loop 'pipeline/loop' in run 'r1'" in message
    assert isinstance(raised.value, TypeError)
    assert run_store.loop_record("r1", "pipeline/loop").checkpoint is None


def test_a_finished_loop_reports_its_result_and_keeps_its_checkpoint(run_store: RunStore) -> None:
    assert run_store.loop_record("r1", "loop") == LoopRecord(finished=False, result=None, checkpoint=None)
    run_store.save_checkpoint("r1", "loop", 4, {"i": 4})
    assert run_store.loop_record("r1", "loop") == (False, None, (4, {"i": 4}))
    run_store.finish_loop("r1", "loop", {"answer": 42})
    assert run_store.loop_record("r1", "loop") == (True, {"answer": 42}, (4, {"i": 4}))
    run_store.finish_loop("r1", "other", None)
    assert run_store.loop_record("r1", "other") == (True, None, None)


def test_each_start_of_a_loop_is_counted_with_its_record_until_a_checkpoint(run_store: RunStore) -> None:
    nothing = LoopRecord(finished=False, result=None, checkpoint=None)
    assert run_store.start_loops("r1", ["a"]) == [(nothing, 1)]
    assert run_store.start_loops("r1", ["a", "b"]) == [(nothing, 2), (nothing, 1)]
    assert run_store.loop_record("r1", "a") == nothing  # a start leaves no checkpoint behind
    run_store.save_checkpoint("r1", "a", 3, {"i": 3})  # progress: counted again from here
    run_store.save_checkpoints("r1", [("b", 1, {"i": 1})])
    assert run_store.start_loops("r1", ["b", "a"]) == [
        (LoopRecord(False, None, (1, {"i": 1})), 1),
        (LoopRecord(False, None, (3, {"i": 3})), 1),
    ]
    assert run_store.start_loops("r1", ["a"]) == [(LoopRecord(False, None, (3, {"i": 3})), 2)]
    run_store.finish_loop("r1", "a", {"answer": 1})
    assert run_store.start_loops("r1", ["a", "c"]) == [
        (LoopRecord(True, {"answer": 1}, (3, {"i": 3})), 3),
        (nothing, 1),
    ]
    assert run_store.start_loops("r2", []) == []
    many = [f"branch/{index}" for index in range(1200)]  # more than one statement's worth
    started = run_store.start_loops("r2", many)
    assert [deliveries for _, deliveries in started] == [1] * 1200


def test_a_stage_is_recorded_and_the_next_started_in_one_call(run_store: RunStore) -> None:
    """``finish_loop_then_start``: a stage's result (its events and usage with it) and the next
    stage's start, counted with its record, as ``finish_loop`` then ``start_loops`` would."""
    run_store.create_run(run_id="r1", runnable="p", input=None)
    nothing = LoopRecord(finished=False, result=None, checkpoint=None)
    event = {"run_id": "r1", "path": "pipeline/0", "phase": "done", "status": "completed", "at": 1.0}
    recorded, started = run_store.finish_loop_then_start(
        "r1", "pipeline/0", {"n": 1}, "pipeline/1", events=[event], input_tokens=3, output_tokens=2
    )
    assert (recorded, started) == ({"n": 1}, (nothing, 1))
    assert run_store.loop_record("r1", "pipeline/0") == (True, {"n": 1}, None)
    assert [e["path"] for _, e in run_store.events("r1")] == ["pipeline/0"]
    record = run_store.get_run("r1")
    assert record is not None and (record.input_tokens, record.output_tokens) == (3, 2)
    # a twin's first result stands; the next stage's second start is counted
    recorded, started = run_store.finish_loop_then_start("r1", "pipeline/0", {"n": 9}, "pipeline/1")
    assert (recorded, started) == ({"n": 1}, (nothing, 2))
    run_store.finish_loop("r1", "pipeline/1", {"n": 2})
    assert run_store.finish_loop_then_start("r1", "pipeline/0", {"n": 1}, "pipeline/1")[1] == (
        LoopRecord(True, {"n": 2}, None),
        3,
    )


@pytest.mark.parametrize("with_events", [False, True], ids=["result alone", "with events"])
def test_a_loop_s_first_result_stands_and_a_later_twin_gets_it_back(
    run_store: RunStore, with_events: bool
) -> None:
    run_store.create_run(run_id="r1", runnable="x", input=None)
    run_store.save_checkpoint("r1", "loop", 2, {"i": 2})

    def events(tag: str) -> list[dict[str, object]]:
        return [{"run_id": "r1", "path": "loop", "phase": "done", "tag": tag}] if with_events else []

    assert run_store.finish_loop("r1", "loop", {"answer": 1}, events=events("first")) == {"answer": 1}
    # a duplicate task of the same loop (one whose start did not read the store) finishes later
    assert run_store.finish_loop("r1", "loop", {"answer": 2}, events=events("twin")) == {"answer": 1}

    run_store.save_checkpoint("r1", "loop", 7, {"i": 7})  # the twin's checkpoints are not kept either
    assert run_store.loop_record("r1", "loop") == (True, {"answer": 1}, (2, {"i": 2}))
    assert [event["tag"] for _, event in run_store.events("r1")] == (["first", "twin"] if with_events else [])
    assert run_store.finish_loop("r1", "nothing", None) is None  # a result of None stands too
    assert run_store.finish_loop("r1", "nothing", {"later": True}) is None


@pytest.mark.parametrize("with_events", [False, True], ids=["result alone", "with events"])
def test_a_loop_s_end_adds_its_task_s_token_usage_to_the_run(run_store: RunStore, with_events: bool) -> None:
    run_store.create_run(run_id="r1", runnable="x", input=None)
    run_store.add_usage("r1", 1, 1)
    events = [{"run_id": "r1", "path": "loop", "phase": "done"}] if with_events else []

    run_store.finish_loop("r1", "loop", 1, events=events, input_tokens=30, output_tokens=6)
    run_store.finish_loop("r1", "loop", 2, events=events, input_tokens=4)  # a twin's usage counts too

    record = run_store.get_run("r1")
    assert record is not None and (record.input_tokens, record.output_tokens) == (35, 7)
    assert run_store.loop_record("r1", "loop").result == 1
    with pytest.raises(ValueError, match="input_tokens"):
        run_store.finish_loop("r1", "other", 1, input_tokens=-1)
    assert run_store.loop_record("r1", "other").finished is False  # refused before anything was written


def test_values_read_back_cannot_change_what_is_stored(run_store: RunStore) -> None:
    given = {"items": [1, 2]}
    run_store.create_run(run_id="r1", runnable="search", input=given)
    given["items"].append(3)
    record = run_store.get_run("r1")
    assert record is not None and record.input == {"items": [1, 2]}
    record.input["items"].append(4)
    assert run_store.get_run("r1").input == {"items": [1, 2]}  # type: ignore[union-attr]


def test_a_stored_record_round_trips_through_json(run_store: RunStore) -> None:
    run_store.create_run(run_id="r1", runnable="search", input={"q": "x"}, token_budget=10)
    run_store.mark_running("r1")
    run_store.finish_run("r1", status="succeeded", output=[1, "two"])
    record = run_store.get_run("r1")
    assert record is not None
    assert RunRecord.from_dict(record.to_dict()) == record

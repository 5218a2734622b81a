"""Retention on every store: ended workflows older than the cut-off go with everything recorded of
them; open runs, and the ended runs of a batch still open, stay; a dry run only counts.
On PostgreSQL, the runs list and the prune read the indexes of migration 0009."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event

from agentloop.actions.human import Question
from agentloop.orchestration.store import RunStore, SqlRunStore
from agentloop.orchestration.store.retention import prune_runs
from agentloop.orchestration.store.waits import Wait, WaitStore, wait_store_for

EVENT = {"path": "", "status": "progress", "phase": "iteration", "iteration": 1}
_WAITS: dict[int, WaitStore] = {}


def waits_of(store: RunStore) -> WaitStore:
    """The one wait store beside ``store`` (the memory twin's keeps its questions in itself)."""
    if id(store) not in _WAITS:
        waits = wait_store_for(store)
        assert waits is not None
        _WAITS[id(store)] = waits
    return _WAITS[id(store)]


def ended(store: RunStore, run_id: str, *, parent: str | None = None, events: int = 2) -> None:
    """A run that started, wrote events, a checkpoint and a question, and ended."""
    store.create_run(run_id=run_id, runnable="retained", input={"n": 1}, parent_run_id=parent)
    store.mark_running(run_id)
    store.append_events(run_id, [EVENT] * events)
    store.save_checkpoint(run_id, "", 1, {"n": 1})
    waits_of(store).record(Wait(run_id=run_id, path="", question=Question(prompt=f"ok {run_id}?")))
    store.finish_run(run_id, status="succeeded", output={"ok": True})


def left(store: RunStore, run_id: str) -> tuple[bool, int, bool, int]:
    """Whether the run is there, its events, whether its checkpoint is, and its questions."""
    waits = waits_of(store)
    return (
        store.get_run(run_id) is not None,
        len(store.events(run_id)),
        store.loop_record(run_id, "").checkpoint is not None,
        len(waits.waits(run_id)),
    )


def prune(store: RunStore, before: datetime, *, dry_run: bool = False) -> Any:
    return prune_runs(store, before=before, dry_run=dry_run, waits=waits_of(store))


def test_ended_workflows_before_the_cut_off_go_with_their_rows_and_nothing_open_does(
    run_store: RunStore,
) -> None:
    store = run_store
    ended(store, "old-1")
    ended(store, "old-2", events=3)
    store.create_run(run_id="old-open", runnable="retained", input=None)  # open: kept at any age
    store.mark_running("old-open")
    store.create_run(run_id="batch", runnable="batch", input=None)  # an open batch...
    ended(store, "batch-0", parent="batch")  # ...keeps its ended children (its summary counts them)
    cut_off = datetime.now(UTC)
    ended(store, "recent")

    dry = prune(store, cut_off, dry_run=True)

    assert (dry.workflows, dry.runs, dry.events, dry.checkpoints, dry.waits) == (2, 2, 5, 2, 2)
    assert dry.dry_run and dry.first_ids == ("old-1", "old-2")
    assert left(store, "old-1") == (True, 2, True, 1)  # a dry run deletes nothing

    done = prune(store, cut_off)

    assert (done.workflows, done.runs, done.events, done.checkpoints, done.waits) == (2, 2, 5, 2, 2)
    assert not done.dry_run and done.first_ids == ("old-1", "old-2")
    assert left(store, "old-1") == left(store, "old-2") == (False, 0, False, 0)
    assert left(store, "recent") == (True, 2, True, 1)
    assert left(store, "batch-0") == (True, 2, True, 1)
    assert store.get_run("old-open") is not None and store.get_run("batch") is not None
    assert prune(store, cut_off).workflows == 0  # nothing left to prune

    store.finish_run("batch", status="succeeded")
    everything = prune(store, datetime.now(UTC) + timedelta(seconds=1))
    assert set(everything.first_ids) == {"recent", "batch", "batch-0"}
    assert store.get_run("old-open") is not None  # still open


def test_a_naive_cut_off_is_refused(run_store: RunStore) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        prune_runs(run_store, before=datetime.now())


# ----- PostgreSQL: the queries at volume read the indexes of migration 0009 --------------------


@contextmanager
def statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """The SQL statements the store sends meanwhile, with their parameters."""
    sent: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", capture)


def plan_of(store: SqlRunStore, call: Callable[[], Any], *, match: str = "") -> str:
    """The plan PostgreSQL picks for the statement ``call`` sends (the first containing ``match``)
    when a sequential scan or a sort is its last resort: on a small database only an index that
    serves the query's filter and order avoids both."""
    with statements(store.engine) as sent:
        call()
    statement, parameters = next((s, p) for s, p in sent if match in s)
    with store.engine.connect() as connection:
        connection.exec_driver_sql("SET enable_seqscan = off")
        connection.exec_driver_sql("SET enable_sort = off")
        connection.exec_driver_sql("SET enable_bitmapscan = off")
        lines = connection.exec_driver_sql("EXPLAIN " + statement, parameters).scalars().all()
        connection.rollback()
    return "\n".join(lines)


@pytest.mark.integration
def test_the_runs_list_and_the_prune_use_the_indexes_of_0009(pg_engine: Engine) -> None:
    with pg_engine.begin() as connection:
        connection.exec_driver_sql("DELETE FROM runs")
    store = SqlRunStore(pg_engine)
    for n in range(30):
        ended(store, f"run-{n}", events=1)

    newest = plan_of(store, lambda: store.list_runs(limit=5))
    by_runnable = plan_of(store, lambda: store.list_runs(limit=5, runnable="retained"))
    paged = plan_of(store, lambda: store.list_runs(limit=5, offset=10))
    pruning = plan_of(store, lambda: prune_runs(store, before=datetime.now(UTC), dry_run=True), match="LIMIT")

    assert "Index Scan Backward using ix_runs_created_at_id" in newest and "Sort" not in newest, newest
    assert "ix_runs_runnable_created_at" in by_runnable, by_runnable
    assert "ix_runs_created_at_id" in paged and "Sort" not in paged, paged
    assert "ix_runs_finished_at" in pruning, pruning


def test_beats_prune_task_uses_the_retention_setting_and_does_nothing_without_it() -> None:
    from agentloop.orchestration.celery_adapter.app import create_app
    from agentloop.orchestration.settings import load_settings
    from agentloop.orchestration.store import InMemoryRunStore

    store = InMemoryRunStore()
    ended(store, "young")
    memory = {"BROKER_URL": "memory://", "RESULT_BACKEND": "cache+memory://"}
    for environ, expected in (
        (memory, {"pruned": False, "reason": "AGENTLOOP_RUN_RETENTION is not set"}),
        ({**memory, "AGENTLOOP_RUN_RETENTION": "30d"}, {"pruned": True, "workflows": 0}),
    ):
        app = create_app(settings=load_settings(environ), store=store)
        try:
            answer = app.tasks["agentloop.prune_runs"].apply().get()
            bad = app.tasks["agentloop.prune_runs"].apply(kwargs={"older_than": "soon"})
        finally:
            app.close()
        assert {key: answer[key] for key in expected} == expected
        assert isinstance(bad.result, ValueError) and "such as 30d" in str(bad.result)
    assert store.get_run("young") is not None


@pytest.mark.parametrize("age", [10**30, 10**400, 1e300, "99999999999d", "3000000000w"])
def test_the_prune_task_refuses_an_age_longer_than_a_hundred_years_clearly(age: Any) -> None:
    from agentloop.orchestration.celery_adapter.app import create_app
    from agentloop.orchestration.settings import load_settings
    from agentloop.orchestration.store import InMemoryRunStore

    store = InMemoryRunStore()
    ended(store, "kept")
    app = create_app(
        settings=load_settings({"BROKER_URL": "memory://", "RESULT_BACKEND": "cache+memory://"}), store=store
    )
    try:
        refused = app.tasks["agentloop.prune_runs"].apply(kwargs={"older_than": age})
    finally:
        app.close()
    assert isinstance(refused.result, ValueError), repr(refused.result)
    assert "at most 100 years" in str(refused.result)
    assert store.get_run("kept") is not None


def test_a_retention_longer_than_a_hundred_years_is_refused_when_the_settings_load() -> None:
    from agentloop.orchestration.settings import load_settings

    with pytest.raises(ValueError, match="at most 100 years"):
        load_settings({"AGENTLOOP_RUN_RETENTION": "99999999999d"})


# ----- what a pruned workflow's late writers leave, and its id launched again -----------------


def just_after_the_rows_of(engine: Engine, *run_ids: str) -> datetime:
    """A cut-off just after the latest row written for ``run_ids`` (their events, checkpoints and
    waits, as stamped), once this process's clock has passed it: what is written next is stamped
    after it. (A cut-off read from the clock alone once came before the wait just written, on a
    loaded CI host whose clock stepped back.)"""
    from sqlalchemy import func, select, union_all

    from agentloop.orchestration.store.tables import checkpoints, human_waits, run_events

    written = union_all(
        select(func.max(run_events.c.created_at).label("at")).where(run_events.c.run_id.in_(run_ids)),
        select(func.max(checkpoints.c.updated_at).label("at")).where(checkpoints.c.run_id.in_(run_ids)),
        select(func.max(human_waits.c.created_at).label("at")).where(human_waits.c.run_id.in_(run_ids)),
    ).subquery()
    with engine.connect() as connection:
        latest = connection.execute(select(func.max(written.c.at))).scalar_one()
    cut_off = latest + timedelta(microseconds=1)  # UTC, aware: the columns' UtcDateTime
    while datetime.now(UTC) <= cut_off:  # a barrier on the clock the next row is stamped with
        time.sleep(0.001)
    return cut_off


def test_rows_a_pruned_workflow_s_late_writers_leave_go_with_the_next_prune(sql_engine: Engine) -> None:
    from agentloop.orchestration.store import SqlRunStore

    store = SqlRunStore(sql_engine)
    ended(store, "root")
    store.create_run(
        run_id="root-branch", runnable="retained", input=None, root_run_id="root", parent_run_id="root"
    )
    store.finish_run("root-branch", status="failed", error={"type": "Boom", "message": "fail-fast"})
    assert prune(store, datetime.now(UTC)).workflows == 1
    # a pack of the fail-fast workflow still running writes on: rows with no run of theirs
    store.save_checkpoint("root-branch", "branch/3", 2, {"n": 2})
    store.append_events("root", [EVENT])
    waits_of(store).record(Wait(run_id="root-branch", path="branch/3", question=Question(prompt="late?")))
    cut_off = just_after_the_rows_of(sql_engine, "root-branch", "root")
    store.save_checkpoint("root-branch", "branch/4", 1, {"n": 1})  # after the cut-off: kept for now
    ended(store, "kept")  # a workflow with its run: never an orphan

    dry = prune(store, cut_off, dry_run=True)
    done = prune(store, cut_off)

    assert (dry.workflows, dry.events, dry.checkpoints, dry.waits) == (0, 1, 1, 1)
    assert (done.workflows, done.events, done.checkpoints, done.waits) == (0, 1, 1, 1)
    assert store.events("root") == []
    assert store.loop_record("root-branch", "branch/3").checkpoint is None
    assert waits_of(store).waits("root-branch") == []
    assert store.loop_record("root-branch", "branch/4").checkpoint is not None
    assert left(store, "kept") == (True, 2, True, 1)
    later = prune(store, datetime.now(UTC) + timedelta(seconds=1))
    assert later.checkpoints == 2 and store.loop_record("root-branch", "branch/4").checkpoint is None


def test_a_pruned_run_s_id_launched_again_is_a_new_run_whose_owner_the_gate_reads_afresh(
    sql_engine: Engine,
) -> None:
    from agentloop.orchestration.errors import RunOwnershipError
    from agentloop.orchestration.runtime.run_gate import RunGate
    from agentloop.orchestration.store import RunOwner, SqlRunStore

    store = SqlRunStore(sql_engine)
    first, second = RunOwner.new("digest"), RunOwner.new("digest")
    store.create_run(run_id="again", runnable="retained", input=None, owner=first)
    gate = RunGate(store)
    gate.check_owner("again", first.token)  # the owner is cached for this process
    store.finish_run("again", status="succeeded", output=1, owner_token=first.token)
    assert prune(store, datetime.now(UTC) + timedelta(seconds=1)).workflows == 1

    store.create_run(run_id="again", runnable="retained", input=None, owner=second)  # the launch re-sent

    gate.check_owner("again", second.token)  # the new run's tasks are admitted
    with pytest.raises(RunOwnershipError):
        gate.check_owner("again", first.token)  # the pruned run's are not


def test_a_run_created_before_the_cut_off_and_ended_after_it_is_kept(run_store: RunStore) -> None:
    store = run_store
    store.create_run(run_id="long", runnable="retained", input=None)  # created before the cut-off...
    store.mark_running("long")
    cut_off = datetime.now(UTC)
    store.finish_run("long", status="succeeded")  # ...ended after it: its age counts from its end

    assert prune(store, cut_off).workflows == 0
    assert store.get_run("long") is not None
    assert prune(store, datetime.now(UTC) + timedelta(seconds=1)).first_ids == ("long",)


def test_an_ended_root_with_a_child_still_running_is_kept(run_store: RunStore) -> None:
    store = run_store
    store.create_run(run_id="root", runnable="retained", input=None)
    store.create_run(
        run_id="root/child", runnable="retained", input=None, root_run_id="root", parent_run_id="root"
    )
    store.mark_running("root/child")  # a branch still going (a pack that has not seen the end)
    store.finish_run("root", status="failed", error={"type": "BranchFailedError"})
    cut_off = datetime.now(UTC) + timedelta(seconds=1)

    assert prune(store, cut_off, dry_run=True).workflows == 0
    assert prune(store, cut_off).workflows == 0
    assert store.get_run("root") is not None and store.get_run("root/child") is not None

    store.finish_run("root/child", status="cancelled")
    gone = prune(store, datetime.now(UTC) + timedelta(seconds=1))
    assert (gone.workflows, gone.runs) == (1, 2)

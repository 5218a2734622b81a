"""A pruned workflow's recording goes with it, on every store: a prune that left
``run_recordings`` behind would keep every recorded model turn of a deleted run for ever."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from agentloop.actions.recording import MODEL, RecordedEntry
from agentloop.orchestration.store import RunStore, SqlRunStore
from agentloop.orchestration.store.recordings import RecordingStore, recording_store_for
from agentloop.orchestration.store.retention import prune_runs


def recordings_of(store: RunStore) -> RecordingStore:
    found = recording_store_for(store)
    assert found is not None
    return found


def recorded_run(store: RunStore, run_id: str, turns: int) -> None:
    store.create_run(run_id=run_id, runnable="recorded", input={"n": 1})
    store.mark_running(run_id)
    entries = [
        RecordedEntry(path="", iteration=1, kind=MODEL, seq=seq, data={"n": seq}) for seq in range(turns)
    ]
    recordings_of(store).add(run_id, entries)
    store.finish_run(run_id, status="succeeded", output={"ok": True})


def test_a_pruned_workflow_s_recording_goes_and_a_kept_one_stays(run_store: RunStore) -> None:
    recorded_run(run_store, "old", turns=3)
    cut_off = datetime.now(UTC)
    recorded_run(run_store, "recent", turns=2)

    dry = prune_runs(run_store, before=cut_off, dry_run=True)
    assert (dry.workflows, dry.recordings) == (1, 3)
    assert len(recordings_of(run_store).entries("old")) == 3  # a dry run deletes nothing

    done = prune_runs(run_store, before=cut_off)

    assert (done.workflows, done.recordings) == (1, 3)
    assert done.to_dict()["recordings"] == 3
    assert recordings_of(run_store).entries("old") == []
    assert len(recordings_of(run_store).entries("recent")) == 2


def test_a_recording_whose_run_is_gone_goes_with_the_next_prune(sql_engine: Engine) -> None:
    """Entries a late writer left for a workflow pruned before (no run row) are orphans."""
    sql_run_store = SqlRunStore(sql_engine)
    recordings_of(sql_run_store).add("gone", [RecordedEntry(path="", iteration=1, kind=MODEL, seq=0)])

    assert prune_runs(sql_run_store, before=datetime.now(UTC) - timedelta(hours=1)).recordings == 0
    assert prune_runs(sql_run_store, before=datetime.now(UTC) + timedelta(seconds=1)).recordings == 1
    assert recordings_of(sql_run_store).entries("gone") == []

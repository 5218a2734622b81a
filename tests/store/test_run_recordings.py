"""Recorded runs in each run store (memory, SQLite, PostgreSQL): one entry a place, under the root
run; a recording file imported and exported whole."""

from __future__ import annotations

import pytest

from agentloop.actions.recording import MODEL, RUN, RecordedEntry
from agentloop.orchestration.replay import RunRecording
from agentloop.orchestration.store import RunStore
from agentloop.orchestration.store.recordings import recording_store_for


def test_a_store_keeps_one_entry_a_place_and_imports_and_exports_a_recording(run_store: RunStore) -> None:
    store = run_store
    recordings = recording_store_for(store)
    assert recordings is not None
    first = RecordedEntry(path="p", iteration=1, kind=MODEL, seq=0, data={"take": 1})
    recordings.add("r-1", [first, RecordedEntry(path="", iteration=0, kind=RUN, seq=0, data={"context": {}})])
    recordings.add("r-1", [RecordedEntry(path="p", iteration=1, kind=MODEL, seq=0, data={"take": 2})])

    assert [(e.path, e.kind, dict(e.data)) for e in recordings.entries("r-1")] == [
        ("", RUN, {"context": {}}),
        ("p", MODEL, {"take": 2}),  # a place recorded again: its last take
    ]
    store.create_run(run_id="r-2", runnable="labels", input=None)
    with pytest.raises(ValueError, match="was not recorded"):
        RunRecording.from_store(store, "r-2")

    file = RunRecording(
        run_id="r-3", runnable="labels", input=1, context={"files": ["f"]}, output=2, entries=(first,)
    )
    file.to_store(store)
    assert RunRecording.from_store(store, "r-3") == file
    file.to_store(store)  # again: replaced, not doubled
    assert RunRecording.from_store(store, "r-3") == file
    with pytest.raises(ValueError, match="is a run of 'labels'"):
        RunRecording(run_id="r-3", runnable="other", entries=(first,)).to_store(store)

"""The progress recorder: events grouped by path, and a transcript without run ids or times."""

from __future__ import annotations

from kit_support import an_event

from agentloop.testing import ProgressRecorder


def test_the_recorder_groups_events_by_path_and_drops_run_id_and_time_from_the_transcript(
    progress_recorder: ProgressRecorder,
) -> None:
    for event in [
        an_event("", "start", "started"),
        an_event("b/2", "start", "started"),
        an_event("a", "start", "started"),
        an_event("", "done", "completed", 1),
    ]:
        progress_recorder(event)

    assert progress_recorder.paths == ["", "b/2", "a"]
    assert list(progress_recorder.by_path()) == ["", "b/2", "a"]
    assert progress_recorder.transcript() == {
        "": [
            ("X", "start", "started", 0, 3, "", {"k": [1]}),
            ("X", "done", "completed", 1, 3, "", {"k": [1]}),
        ],
        "a": [("X", "start", "started", 0, 3, "", {"k": [1]})],
        "b/2": [("X", "start", "started", 0, 3, "", {"k": [1]})],
    }
    assert progress_recorder.statuses() == ["started", "completed"]
    progress_recorder.clear()
    assert progress_recorder.events == []

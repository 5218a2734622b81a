"""The engine's progress stream: started, one progress event per iteration, then completed or failed."""

from __future__ import annotations

from typing import Any

import pytest
from engine_support import FAST, CountingLoop, counting_loop, run
from hypothesis import given
from hypothesis import strategies as st

from agentloop.loops import ProgressEvent, ProgressStatus
from agentloop.testing import ProgressRecorder


@FAST
@given(bound=st.integers(0, 20), complete_after=st.integers(0, 25))
def test_a_loop_reports_started_then_one_progress_per_iteration_then_completed(
    bound: int, complete_after: int
) -> None:
    recorder = ProgressRecorder()
    run(counting_loop(bound=bound, target=complete_after), on_progress=recorder)

    iterations = min(bound, complete_after)
    stopped_by = "complete" if complete_after <= bound else "bound"
    assert recorder.transcript() == {
        "": [
            ("CountingLoop", "start", "started", 0, bound, "", {}),
            *[
                ("CountingLoop", "iteration", "progress", n, bound, f"iteration {n} of at most {bound}", {})
                for n in range(1, iterations + 1)
            ],
            (
                "CountingLoop",
                "done",
                "completed",
                iterations,
                bound,
                "complete" if stopped_by == "complete" else "hit the iteration bound",
                {"stopped_by": stopped_by},
            ),
        ]
    }


@FAST
@given(
    fail_at=st.integers(1, 5),
    hook=st.sampled_from(["advance_state", "is_complete", "build_progress_event", "should_compress"]),
)
def test_a_hook_that_raises_ends_the_stream_with_failed_in_phase_error(fail_at: int, hook: str) -> None:
    def boom(self: Any, *, state: Any, iteration: int) -> Any:
        if iteration == fail_at:
            raise RuntimeError(f"{hook} broke")
        return getattr(CountingLoop, hook)(self, state=state, iteration=iteration)

    broken = type("Broken", (CountingLoop,), {hook: boom, "target": 99})
    recorder = ProgressRecorder()

    with pytest.raises(RuntimeError, match=f"{hook} broke"):
        run(broken, on_progress=recorder)

    # build_progress_event is told the count of finished iterations, so it fails one event earlier
    progress_events = fail_at - 1 if hook == "build_progress_event" else fail_at
    assert recorder.statuses("") == ["started", *["progress"] * progress_events, "failed"]
    last = recorder.events[-1]
    assert (last.phase, last.iteration, last.message) == ("error", fail_at, f"RuntimeError: {hook} broke")


def test_every_event_of_a_loop_is_json_data_that_round_trips() -> None:
    recorder = ProgressRecorder()
    run(counting_loop(bound=4, target=3), on_progress=recorder, run_id="run-1")

    for event in recorder.events:
        assert ProgressEvent.from_json(event.to_json()) == event
        assert event.run_id == "run-1"
        assert event.status in set(ProgressStatus)

"""Recorded runs as regression tests: :func:`assert_replays` (the ``replay_recording`` fixture).

Record a run once (``record=True``, ``agentloop trigger --record``), export it
(``agentloop runs export RUN_ID -o tests/recordings/plan.json``), and keep the file
with the tests::

    def test_the_planner_still_asks_what_it_asked(replay_recording):
        replay_recording("tests/recordings/plan.json", runnable=PlanTrip)

The test runs the runnable in-process against the recording, whichever provider
recorded it (the recording keeps the provider-neutral request and reply), with no
model and no network, and fails with the first divergence of its model requests
and the difference of its output.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentloop.loops.contract import Runnable
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.replay import ReplayProcessor, ReplayReport, RunRecording, replay
from agentloop.orchestration.runtime.context import StandardContext

__all__ = ["ReplayMismatch", "assert_replays"]


class ReplayMismatch(AssertionError):
    """A replay that differs from its recording; its message is the report."""

    def __init__(self, report: ReplayReport) -> None:
        self.report = report
        super().__init__(report.describe())


def assert_replays(
    recording: str | Path | RunRecording,
    *,
    runnable: type[Runnable] | None = None,
    context: Any = None,
    registry: RunnableRegistry | None = None,
) -> ReplayReport:
    """Replay ``recording`` (a file :command:`agentloop runs export` wrote, or a
    :class:`~agentloop.orchestration.replay.RunRecording`) and return its report; raise
    :class:`ReplayMismatch` when it differs from the recording.

    The runnable is ``runnable``, else the one ``registry`` holds under the recorded name. With
    ``runnable`` and no ``context``, the context is a
    :class:`~agentloop.orchestration.runtime.context.StandardContext` around a
    :class:`~agentloop.orchestration.replay.ReplayProcessor`. For code with no event loop
    running (an ``async`` test awaits :func:`~agentloop.orchestration.replay.replay` itself).
    """
    if not isinstance(recording, RunRecording):
        recording = RunRecording.load(recording)
    if runnable is not None and context is None:
        context = StandardContext(processor=ReplayProcessor())
    report = asyncio.run(replay(recording, runnable=runnable, context=context, registry=registry))
    if not report.ok:
        raise ReplayMismatch(report)
    return report

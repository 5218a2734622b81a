"""``ProgressRecorder``: an ``on_progress`` callback that keeps every event."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from agentloop.loops.progress import ProgressEvent


class ProgressRecorder:
    """Pass as ``on_progress``; then read ``events``, ``by_path()`` or ``transcript()``."""

    def __init__(self) -> None:
        self.events: list[ProgressEvent] = []

    def __call__(self, event: ProgressEvent) -> None:
        self.events.append(event)

    def clear(self) -> None:
        self.events.clear()

    @property
    def paths(self) -> list[str]:
        """Paths in order of first appearance."""
        return list(dict.fromkeys(event.path for event in self.events))

    def by_path(self) -> dict[str, list[ProgressEvent]]:
        grouped: dict[str, list[ProgressEvent]] = defaultdict(list)
        for event in self.events:
            grouped[event.path].append(event)
        return dict(grouped)

    def transcript(self) -> dict[str, list[tuple[Any, ...]]]:
        """Per path, each event without its run id and time: what parity tests compare.

        Branches run concurrently, so only the order *within* a path is defined.
        """
        return {
            path: [
                (
                    e.runnable,
                    e.phase,
                    str(e.status),
                    e.iteration,
                    e.max_iterations,
                    e.message,
                    e.to_dict()["data"],
                )
                for e in events
            ]
            for path, events in sorted(self.by_path().items())
        }

    def statuses(self, path: str = "") -> list[str]:
        return [str(event.status) for event in self.events if event.path == path]

"""Gauges of the whole deployment, read when Prometheus scrapes: queue depth and runs not ended.

Counters count what one process did; these read shared state, the broker's queues and the run
store, so any one process can answer for every worker (``agentloop serve`` does):

- ``agentloop_queue_depth{queue}``: messages waiting in each of the app's queues, its dead-letter
  queue (``<queue>.dead``) and its holding queues (``<queue>.wire.<version>``, a bounded set);
- ``agentloop_runs_in_flight{runnable,status}``: runs ``pending``, ``running`` or ``waiting`` (on a
  person's answer: the runs waiting on a person);
- ``agentloop_key_runs{key,state}``: each concurrency key's runs ``in_flight`` (holding a slot),
  ``waiting``, ``refused`` and ``evicted`` (cancelled to make room), and ``waits`` (how often its
  launches were sent again to wait); the :data:`MAX_KEYS` busiest keys by name, the others summed
  as ``(other)``: the label set stays bounded whatever keys launches name;
- ``agentloop_key_branches{key,state}``: each concurrency key's branch tasks ``in_flight``
  (holding a slot of its ``Concurrency(branch_limit=...)``) and ``waiting`` for one, a pack
  counted as its branches; the same keys as ``agentloop_key_runs`` (``0`` for a key whose
  runnable sets no branch limit);
- ``agentloop_metrics_source_up{source}``: ``1`` when the ``broker`` or the ``store`` answered this
  scrape, ``0`` when it did not. A source that does not answer gives no series at all, never
  zeros: an outage does not read as an empty queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from opentelemetry.metrics import CallbackOptions, Meter, Observation

__all__ = [
    "BRANCH_STATES",
    "MAX_KEYS",
    "OTHER_KEYS",
    "FleetGauges",
    "KeyCounts",
    "QueueDepths",
    "RunCounts",
    "bounded_keys",
]

logger = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

QueueDepths = Callable[[], Mapping[str, int]]
"""Messages waiting in each queue, by queue name (raises when the broker cannot say)."""
RunCounts = Callable[[], Mapping[tuple[str, str], int]]
"""Runs not ended, by ``(runnable, status)`` (raises when the store cannot say)."""
KeyCounts = Callable[[], Mapping[str, Mapping[str, int]]]
"""Each concurrency key's runs by state (``in_flight``, ``waiting``, ...) and its branches
(:data:`BRANCH_STATES`); raises when the store cannot say."""
#: The states of a key's counts that are its branches', each the ``agentloop_key_branches`` state.
BRANCH_STATES = {"branches_in_flight": "in_flight", "branches_waiting": "waiting"}
#: The most concurrency keys the gauges name; the others are summed as ``(other)``.
MAX_KEYS = 50
OTHER_KEYS = "(other)"


def bounded_keys(counts: Mapping[str, Mapping[str, int]], most: int = MAX_KEYS) -> dict[str, dict[str, int]]:
    """``counts`` with at most ``most`` keys by name (the busiest: in flight, then waiting) and
    every other key's counts summed under :data:`OTHER_KEYS`."""

    def busy(key: str) -> tuple[int, int, int, str]:
        states = counts[key]
        return (
            -states.get("in_flight", 0),
            -states.get("waiting", 0),
            -states.get("branches_in_flight", 0),
            key,
        )

    ranked = sorted(counts, key=busy)
    kept = {key: dict(counts[key]) for key in ranked[:most]}
    for key in ranked[most:]:
        other = kept.setdefault(OTHER_KEYS, {})
        for state, count in counts[key].items():
            other[state] = other.get(state, 0) + count
    return kept


class FleetGauges:
    """The observable gauges of one deployment on ``meter``, read through ``queue_depths`` and
    ``run_counts`` at each scrape."""

    def __init__(
        self,
        meter: Meter,
        *,
        queue_depths: QueueDepths,
        run_counts: RunCounts,
        key_counts: KeyCounts | None = None,
    ) -> None:
        self._queue_depths, self._run_counts, self._key_counts = queue_depths, run_counts, key_counts
        self._up: dict[str, int] = {}
        self._branches: dict[str, dict[str, int]] = {}  # the keys' branches read with their runs
        # Read in the order they were made: the gauges first, then whether their sources answered.
        meter.create_observable_gauge(
            "agentloop_queue_depth",
            callbacks=[self._observe_queues],
            unit="1",
            description="Messages waiting in the broker, by queue.",
        )
        meter.create_observable_gauge(
            "agentloop_runs_in_flight",
            callbacks=[self._observe_runs],
            unit="1",
            description="Runs not ended (pending, running, waiting on a person), by runnable and status.",
        )
        if key_counts is not None:
            meter.create_observable_gauge(
                "agentloop_key_runs",
                callbacks=[self._observe_keys],
                unit="1",
                description="Each concurrency key's runs in flight, waiting, refused, evicted; its waits.",
            )
            meter.create_observable_gauge(
                "agentloop_key_branches",
                callbacks=[self._observe_branches],
                unit="1",
                description="Each concurrency key's branch tasks holding a branch slot, waiting for one.",
            )
        meter.create_observable_gauge(
            "agentloop_metrics_source_up",
            callbacks=[self._observe_up],
            unit="1",
            description="Whether the broker and the run store answered the last scrape (1) or not (0).",
        )

    def _read(self, source: str, read: Callable[[], Mapping[K, V]]) -> Mapping[K, V]:
        try:
            values = read()
        except Exception:  # the broker's, the database's: the scrape goes on without this source
            logger.warning("metrics: the %s did not answer; its gauges are left out", source, exc_info=True)
            self._up[source] = 0
            return {}
        self._up[source] = 1
        return values

    def _observe_queues(self, options: CallbackOptions) -> Iterable[Observation]:
        depths = self._read("broker", self._queue_depths)
        return [Observation(int(depth), {"queue": queue}) for queue, depth in depths.items()]

    def _observe_runs(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = self._read("store", self._run_counts)
        return [
            Observation(int(count), {"runnable": runnable, "status": status})
            for (runnable, status), count in counts.items()
        ]

    def _observe_keys(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._key_counts is None:
            return []
        counts = bounded_keys(self._read("store", self._key_counts))
        self._branches = {
            key: {BRANCH_STATES[state]: count for state, count in states.items() if state in BRANCH_STATES}
            for key, states in counts.items()
        }
        return [
            Observation(int(count), {"key": key, "state": state})
            for key, states in counts.items()
            for state, count in states.items()
            if state not in BRANCH_STATES
        ]

    def _observe_branches(self, options: CallbackOptions) -> Iterable[Observation]:
        """The branches of the keys :meth:`_observe_keys` read (read just before it, as made)."""
        branches, self._branches = self._branches, {}
        return [
            Observation(int(count), {"key": key, "state": state})
            for key, states in branches.items()
            for state, count in states.items()
        ]

    def _observe_up(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(up, {"source": source}) for source, up in sorted(self._up.items())]

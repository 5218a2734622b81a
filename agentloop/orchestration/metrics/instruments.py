"""The instruments of a run's life, on an OpenTelemetry meter: names, labels and buckets.

What a Prometheus scrape shows (the exporter adds ``_total`` to counters and the unit to names):

- ``agentloop_runs_started_total{runnable}`` and ``agentloop_runs_finished_total{runnable,status}``;
- ``agentloop_run_duration_seconds{runnable,status}``: from a run's first start (else its
  creation) to its end, a histogram;
- ``agentloop_step_duration_seconds{runnable,status}``: one loop or action stage in one task
  (``completed``, ``failed``, ``paused`` for a person's answer), a histogram;
- model calls as OpenTelemetry's GenAI conventions name them (the tracing's spans use the same
  attributes): ``gen_ai_client_operation_duration_seconds`` (a histogram: its ``_count`` is the
  calls, ``error_type="model_failure"`` marks the failed ones) and ``gen_ai_client_token_usage``
  (tokens per call, ``gen_ai_token_type`` ``input`` or ``output``; its ``_sum`` is the tokens),
  both by ``gen_ai_provider_name`` and ``gen_ai_request_model``;
- ``agentloop_key_admissions_total{key,result}``: launches of a concurrency key asking for a slot
  (``admitted``, ``waited``: sent again to wait, ``refused``, ``evicted``: a run cancelled to make
  room), at most :data:`MAX_KEYS` keys per process (later ones as ``(other)``);
- ``agentloop_cache_lookups_total{result}`` (``hit`` or ``miss``) and
  ``agentloop_cache_tokens_saved_total``;
- ``agentloop_pack_loop_blocked_seconds{runnable}``: how long a packed branch held its pack's
  event loop without awaiting (``orchestration/packing/lag.py``), a histogram whose ``_count``
  is the times it did.

Labels are bounded: registered runnable names, statuses, providers and configured model names.
A run the launch contract refused keeps no name it was sent (``<hidden str 12 chars>``, or a name
a poison message carried), so its series are labelled ``(refused)``, and one process labels at
most :data:`MAX_RUNNABLES` names (later ones count as ``(other)``): no message can make a series.
"""

from __future__ import annotations

import threading

from opentelemetry.metrics import Meter

__all__ = [
    "DURATION_BUCKETS",
    "MAX_KEYS",
    "MAX_RUNNABLES",
    "MODEL_DURATION_BUCKETS",
    "OTHER",
    "REFUSED",
    "TOKEN_BUCKETS",
    "RunInstruments",
]

#: Seconds, for runs and steps: a forced-tool step takes seconds, a run with people in it hours.
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)
#: Seconds of one model call: the GenAI conventions' advice.
MODEL_DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
#: Tokens of one call: the GenAI conventions' advice, from 16 to a million.
TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)


#: The most runnable names one process puts on its series.
MAX_RUNNABLES = 500
#: The most concurrency keys one process puts on its series.
MAX_KEYS = 100
#: The ``runnable`` label of a run whose launch was refused, and of names past :data:`MAX_RUNNABLES`.
REFUSED, OTHER = "(refused)", "(other)"
#: What a refused launch's run record holds in place of a name (``orchestration/runtime/launches.py``,
#: ``celery_adapter/edge_consumer.py``).
_REFUSED_NAMES = ("<hidden", "(none)", "(unreadable)")


class RunInstruments:
    """The counters and histograms of runs, steps, model calls and the step cache, on ``meter``."""

    def __init__(self, meter: Meter) -> None:
        self._started = meter.create_counter(
            "agentloop_runs_started", unit="1", description="Runs started (their first start), by runnable."
        )
        self._finished = meter.create_counter(
            "agentloop_runs_finished", unit="1", description="Runs ended, by runnable and final status."
        )
        self._run_duration = meter.create_histogram(
            "agentloop_run_duration",
            unit="s",
            description="From a run's first start to its end, by runnable and final status.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._step_duration = meter.create_histogram(
            "agentloop_step_duration",
            unit="s",
            description="One loop or action stage in one task, by runnable and how it ended.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._loop_blocked = meter.create_histogram(
            "agentloop_pack_loop_blocked",
            unit="s",
            description="A packed branch held its pack's event loop without awaiting, by runnable.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._model_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Model calls: how long each took, by provider and model (error.type: failed).",
            explicit_bucket_boundaries_advisory=MODEL_DURATION_BUCKETS,
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens of each model call, by provider, model and token type.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self._cache_lookups = meter.create_counter(
            "agentloop_cache_lookups", unit="1", description="Cached steps looked up, by result (hit, miss)."
        )
        self._runnables: set[str] = set()
        self._keys: set[str] = set()
        self._lock = threading.Lock()
        self._key_admissions = meter.create_counter(
            "agentloop_key_admissions",
            unit="1",
            description="Launches of a concurrency key asking for a slot, by key and result.",
        )
        self._tokens_saved = meter.create_counter(
            "agentloop_cache_tokens_saved", unit="1", description="Model tokens the step cache's hits saved."
        )

    def label(self, runnable: str) -> str:
        """The ``runnable`` label of ``runnable`` (see the module doc)."""
        if runnable.startswith(_REFUSED_NAMES):
            return REFUSED
        with self._lock:
            if runnable not in self._runnables:
                if len(self._runnables) >= MAX_RUNNABLES:
                    return OTHER
                self._runnables.add(runnable)
        return runnable

    def key_label(self, key: str) -> str:
        """The ``key`` label of a concurrency key (at most :data:`MAX_KEYS`, then ``(other)``)."""
        with self._lock:
            if key not in self._keys:
                if len(self._keys) >= MAX_KEYS:
                    return OTHER
                self._keys.add(key)
        return key

    def key_admitted(self, key: str, result: str) -> None:
        self._key_admissions.add(1, {"key": self.key_label(key), "result": result})

    def run_started(self, runnable: str) -> None:
        self._started.add(1, {"runnable": self.label(runnable)})

    def run_ended(self, runnable: str, status: str, seconds: float | None) -> None:
        labels = {"runnable": self.label(runnable), "status": status}
        self._finished.add(1, labels)
        if seconds is not None:
            self._run_duration.record(seconds, labels)

    def step_ended(self, runnable: str, status: str, seconds: float) -> None:
        self._step_duration.record(max(0.0, seconds), {"runnable": self.label(runnable), "status": status})

    def pack_loop_blocked(self, runnable: str, seconds: float) -> None:
        self._loop_blocked.record(max(0.0, seconds), {"runnable": self.label(runnable)})

    def model_called(
        self,
        *,
        provider: str,
        model: str,
        seconds: float,
        input_tokens: int,
        output_tokens: int,
        failed: bool,
    ) -> None:
        labels = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        }
        timed = {**labels, "error.type": "model_failure"} if failed else labels
        self._model_duration.record(max(0.0, seconds), timed)
        for kind, tokens in (("input", input_tokens), ("output", output_tokens)):
            if tokens:
                self._tokens.record(tokens, {**labels, "gen_ai.token.type": kind})

    def cache_looked_up(self, *, hit: bool, tokens_saved: int) -> None:
        self._cache_lookups.add(1, {"result": "hit" if hit else "miss"})
        if hit and tokens_saved > 0:
            self._tokens_saved.add(tokens_saved)

"""Where runs, steps, model calls and cache lookups are counted: no-ops until a process installs
the instruments (``exporter.py``).

The calls are spread over the orchestration (the run store records a run's start and end, the
engine a step's, the processors' base a model call, the store's usage meter a cache lookup); each
is one attribute read when metrics are off. No OpenTelemetry import here, so the orchestration
runs without the ``metrics`` extra.
"""

from __future__ import annotations

import functools
import threading
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentloop.orchestration.metrics.instruments import RunInstruments

__all__ = [
    "Recorder",
    "cache_looked_up",
    "key_admitted",
    "current_instruments",
    "model_called",
    "pack_loop_blocked",
    "process_recorder",
    "run_ended",
    "run_started",
    "step_ended",
    "use_instruments",
]


class Recorder:
    """Where this process counts: the instruments :func:`use_instruments` installed (none at
    first), and the exporter that reads them (``exporter.py``). One per process, as the scrape
    port it is served on: :func:`process_recorder`."""

    def __init__(self) -> None:
        self.instruments: RunInstruments | None = None
        self.exporter: object | None = None
        self.lock = threading.Lock()


@functools.cache
def process_recorder() -> Recorder:
    """This process's :class:`Recorder`."""
    return Recorder()


def use_instruments(instruments: RunInstruments | None) -> RunInstruments | None:
    """Count this process's runs with ``instruments`` from now on (``None``: stop); returns the
    instruments used before."""
    recorder = process_recorder()
    previous, recorder.instruments = recorder.instruments, instruments
    return previous


def current_instruments() -> RunInstruments | None:
    """The instruments this process counts with, or ``None``."""
    return process_recorder().instruments


def run_started(runnable: str) -> None:
    """A run of ``runnable`` started (its first start: a redelivery or a resumed wait is not one)."""
    if (instruments := current_instruments()) is not None:
        instruments.run_started(runnable)


def run_ended(runnable: str, status: str, began: datetime | None, ended: datetime) -> None:
    """A run of ``runnable`` ended with ``status``; it took ``ended - began`` (``began``: its first
    start, else its creation; ``None``: unknown, so no duration)."""
    if (instruments := current_instruments()) is not None:
        seconds = None if began is None else max(0.0, (ended - began).total_seconds())
        instruments.run_ended(runnable, status, seconds)


def step_ended(runnable: str, status: str, seconds: float) -> None:
    """A loop or action stage of ``runnable`` ran for ``seconds`` in one task and ``status``
    (``completed``, ``failed`` or ``paused``: waiting on a person)."""
    if (instruments := current_instruments()) is not None:
        instruments.step_ended(runnable, status, seconds)


def pack_loop_blocked(runnable: str, seconds: float) -> None:
    """A packed branch of ``runnable`` held its pack's event loop for ``seconds`` without awaiting."""
    if (instruments := current_instruments()) is not None:
        instruments.pack_loop_blocked(runnable, seconds)


def model_called(
    *, provider: str, model: str, seconds: float, input_tokens: int, output_tokens: int, failed: bool
) -> None:
    """A model call to ``provider``'s ``model`` took ``seconds``, used the tokens given, and
    failed or not."""
    if (instruments := current_instruments()) is not None:
        instruments.model_called(
            provider=provider,
            model=model,
            seconds=seconds,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            failed=failed,
        )


def cache_looked_up(*, hit: bool, tokens_saved: int = 0) -> None:
    """A cached step was looked up: a hit (saving ``tokens_saved``) or a miss."""
    if (instruments := current_instruments()) is not None:
        instruments.cache_looked_up(hit=hit, tokens_saved=tokens_saved)


def key_admitted(key: str, result: str, *, evicted: bool = False) -> None:
    """A launch of concurrency key ``key`` asked for a slot: ``result`` is ``admitted``, ``waited``
    or ``refused``; ``evicted`` when it cancelled the key's oldest run to make room."""
    if (instruments := current_instruments()) is not None:
        instruments.key_admitted(key, result)
        if evicted:
            instruments.key_admitted(key, "evicted")

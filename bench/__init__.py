"""Benchmarks for the engine. Run them with ``python -m bench`` (see ``bench/README.md``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchOptions:
    """What the command line passes to every benchmark."""

    #: A fast smoke run: fewer iterations and rounds; the figures are only indicative.
    quick: bool = False
    #: Override the benchmark's number of interleaved rounds.
    rounds: int | None = None
    #: Override the benchmark's problem size (e.g. iterations per run).
    size: int | None = None
    #: Also print a cProfile breakdown of the framework side.
    profile: bool = False


__all__ = ["BenchOptions"]

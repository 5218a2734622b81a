"""Forks of recorded runs: replayed up to a checkpoint, then on live as a new run (``fork.py``)."""

from __future__ import annotations

from agentloop.orchestration.forks.fork import ForkPoint, ForkReport, ForkTap, check_fork_point, fork

__all__ = ["ForkPoint", "ForkReport", "ForkTap", "check_fork_point", "fork"]

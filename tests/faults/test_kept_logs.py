"""A failed scenario keeps the worker's whole log of it under ``tests/artifacts/faults/``: its
tracebacks say where an error was raised (the error lines alone did not name Celery's
``on_chord_part_return`` in the ``Redis restarted`` hunt)."""

from __future__ import annotations

from typing import Any

from .suite import LOGS, Scenario, keep_log


class _Rig:
    log_mark = len("before the scenario\n")

    def worker_log(self) -> str:
        return 'before the scenario\nTraceback (most recent call last):\n  File "redis.py"\n'


def _scenario() -> Scenario:
    def run(rig: Any, size: Any) -> Any:
        raise AssertionError("not run here")

    return Scenario(name="broker restarted: twice", run=run)


def test_a_failed_scenario_s_worker_log_is_kept_from_its_mark() -> None:
    path = keep_log(_Rig(), _scenario())  # type: ignore[arg-type]
    try:
        assert path.parent == LOGS and path.name.startswith("broker-restarted-twice-")
        assert path.read_text(encoding="utf-8") == 'Traceback (most recent call last):\n  File "redis.py"\n'
    finally:
        path.unlink()

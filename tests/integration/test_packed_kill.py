"""A pack of branches whose pool process is SIGKILLed mid-pack: sent again (the worker rejects
the message of a task whose process died), the pack runs only the branches without a result,
each from its own last checkpoint (``docs/how-to/packing.md``). The whole worker killed, the
broker's redelivery does the same: ``tests/faults`` (its ``packed`` scenarios)."""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.client import CeleryAgentRunner

#: The branches' goals: two end before the kill, two are killed halfway.
GOALS = [1, 2, 5, 6]
#: A step takes longer than the least time between checkpoints (0.5 s): each step is saved.
STEP_SECONDS = 0.6


def _lines(log: Path) -> list[tuple[int, int, int]]:
    """``(iteration, pid, goal)`` per iteration run."""
    if not log.exists():
        return []
    rows = (line.split() for line in log.read_text().splitlines())
    return [(int(i), int(pid), int(goal)) for i, pid, goal in rows]


@pytest.mark.integration
def test_a_pack_killed_midway_resumes_each_branch_from_its_own_checkpoint(
    redis_celery: Any, tmp_path: Path
) -> None:
    log = tmp_path / "iterations.log"
    runner = CeleryAgentRunner.create(
        runnable="parity.packed_counts",
        context={"log": str(log), "step_seconds": STEP_SECONDS},
        app=redis_celery.app,
        store=redis_celery.store,
    )
    handle = runner.request_sync(input=GOALS)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(goal == 6 for _, _, goal in _lines(log)) < 3:
        time.sleep(0.02)
    before = _lines(log)
    pids = {pid for _, pid, _ in before}
    assert len(pids) == 1 and os.getpgid(next(iter(pids))) == redis_celery.worker.pid  # one pool child
    os.kill(next(iter(pids)), signal.SIGKILL)
    before = _lines(log)

    assert handle.wait_sync(timeout=60) == [{"counted": goal} for goal in GOALS]
    lines = _lines(log)
    assert "agentloop.pack[" in redis_celery.worker.log_text()  # they ran in a pack
    after: dict[int, list[int]] = defaultdict(list)
    for iteration, pid, goal in lines[len(before) :]:
        assert pid not in pids
        after[goal].append(iteration)
    # the branches that had ended kept their result: none of their iterations ran again
    assert set(after) == {5, 6}, lines
    for goal in (5, 6):
        done_before = max(i for i, _, g in before if g == goal)
        # each resumed from its own checkpoint: at most the step in flight again, none before it
        assert after[goal][0] in (done_before, done_before + 1), (goal, lines)
        assert sorted({i for i, _, g in lines if g == goal}) == list(range(goal))
        assert sum(g == goal for _, _, g in lines) <= goal + 1

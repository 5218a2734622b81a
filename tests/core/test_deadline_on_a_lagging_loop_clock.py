"""A run's deadline cuts its work once ``time.monotonic()`` has reached it, also on an event loop
whose clock lags behind that one (uvloop's is libuv's, read once per turn of the loop: a timer armed
late in a long turn fires that much early). The cut work reads as past its deadline, never as
cancelled, and :func:`within_deadline` raises ``RunDeadlineExceededError``, not ``TimeoutError``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from agentloop.actions import RunDeadlineExceededError
from agentloop.loops.scope import RunScope, failure_phase, within_deadline

#: How far the loop's clock lags while the deadline's timer is armed (s).
LAG = 0.2


class LaggingLoop(asyncio.SelectorEventLoop):
    """A loop whose clock reads ``lag`` seconds behind ``time.monotonic()`` while ``lag`` is set."""

    lag = 0.0

    def time(self) -> float:
        return time.monotonic() - self.lag


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    loop = LaggingLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


async def cut_by_the_deadline(seconds: float) -> tuple[float, str, float]:
    """Arms a deadline ``seconds`` away while the loop's clock lags :data:`LAG` behind, lets the
    clock catch up at the loop's next turn, and waits on work that only the deadline ends: when
    (``time.monotonic()``) the work was cut, the phase it read, and the deadline."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, LaggingLoop)
    loop.lag = LAG
    loop.call_soon(setattr, loop, "lag", 0.0)  # the clock catches up once the timer is armed
    scope = RunScope(run_id="run", path="loop", deadline=time.monotonic() + seconds)
    cut: list[tuple[float, str]] = []

    async def work() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError as cancelled:
            cut.append((time.monotonic(), failure_phase(cancelled, scope)))
            raise

    with pytest.raises(RunDeadlineExceededError, match="run run passed its deadline"):
        await within_deadline(scope, work())
    assert scope.deadline is not None
    return cut[0][0], cut[0][1], scope.deadline


def test_work_is_cut_at_its_deadline_not_when_a_lagging_clock_wakes_early() -> None:
    cut_at, phase, deadline = run(cut_by_the_deadline(LAG + 0.1))
    assert cut_at >= deadline  # before the fix: cut 0.2 s early, as "cancelled", with TimeoutError
    assert phase == "deadline_exceeded"


def test_a_deadline_already_passed_cuts_the_work_at_once() -> None:
    cut_at, phase, deadline = run(cut_by_the_deadline(0.0))
    assert cut_at >= deadline
    assert phase == "deadline_exceeded"

"""The process's threads for packs' plain-function work and store writes (``packing/threads.py``).

A pack's event loop hands work to them; a hand-over must never wait for a thread to start: under
a contended GIL that wait stalled the loop, and every other pack's that submitted meanwhile,
for tenths of a second (``ThreadPoolExecutor.submit`` starts its threads itself, under a lock
all submitters share).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agentloop.orchestration.packing import threads as pack_threads_module
from agentloop.orchestration.packing.threads import PackThreads, SpawningThreads

WAIT = 10.0


@pytest.fixture
def gated_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Starting a pack thread (not the spawner) waits until the returned event is set: a GIL so
    contended that a new thread is not scheduled."""
    gate = threading.Event()
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name.startswith("agentloop-pack") and not self.name.endswith("-spawner"):
            assert gate.wait(WAIT), "the gate was never opened"
        original(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    with own_threads(monkeypatch):
        yield gate
        gate.set()


@contextmanager
def own_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's pack threads made anew for the test, and shut after it."""
    shared: dict[str, SpawningThreads] = {}
    monkeypatch.setattr(pack_threads_module, "_shared", shared)
    try:
        yield
    finally:
        for pool in shared.values():
            pool.shutdown()


def test_a_packs_loop_hands_work_over_without_waiting_for_a_thread_to_start(
    gated_starts: threading.Event,
) -> None:
    """The loop's call returns while no thread can start; the work runs once one has."""
    handed: list[asyncio.Future[int]] = []

    async def pack() -> int:
        handed.append(PackThreads()(lambda: 42))
        gated_starts.set()  # reached only when the hand-over did not wait for the start
        return await handed[0]

    outcome: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: outcome.update(value=asyncio.run(pack())), daemon=True)
    runner.start()
    runner.join(WAIT + 5)
    assert handed, "the pack's loop waited for a thread to start"
    assert outcome == {"value": 42}


def test_work_returns_its_value_or_its_error_in_the_callers_context(monkeypatch: pytest.MonkeyPatch) -> None:
    name: contextvars.ContextVar[str] = contextvars.ContextVar("name", default="none")

    def fail() -> None:
        raise ValueError("bad step")

    async def pack() -> str:
        offload = PackThreads()
        name.set("branch/1")
        with pytest.raises(ValueError, match="bad step"):
            await offload(fail)
        value = await offload(name.get)
        assert offload.calls == 2
        return value

    with own_threads(monkeypatch):
        assert asyncio.run(pack()) == "branch/1"


def test_threads_are_kept_made_only_for_work_running_at_once_and_bounded() -> None:
    pool = SpawningThreads(3, "test-threads")
    try:
        for expected in range(5):  # one at a time: one thread serves them all
            assert pool.submit(lambda n=expected: n).result(WAIT) == expected
        assert pool.threads == 1

        release = threading.Event()
        running = threading.Semaphore(0)

        def hold(n: int) -> int:
            running.release()
            assert release.wait(WAIT)
            return n

        futures = [pool.submit(hold, n) for n in range(5)]
        for _ in range(3):  # three run at once: the bound
            assert running.acquire(timeout=WAIT)
        assert not running.acquire(timeout=0.2)  # the other two wait for a thread
        assert pool.threads == 3
        release.set()
        assert [future.result(WAIT) for future in futures] == [0, 1, 2, 3, 4]
        assert pool.threads == 3
    finally:
        pool.shutdown()


def test_a_shut_pool_takes_no_more_work_and_its_threads_end() -> None:
    pool = SpawningThreads(2, "test-threads")
    assert pool.submit(lambda: 1).result(WAIT) == 1
    before = {thread.name for thread in threading.enumerate()}
    assert "test-threads_0" in before
    pool.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: 2)
    for thread in threading.enumerate():
        if thread.name == "test-threads_0":
            thread.join(WAIT)
    assert "test-threads_0" not in {thread.name for thread in threading.enumerate()}


def test_work_fails_with_the_error_when_no_thread_can_be_started(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A system that refuses threads fails the queued work with its error: no caller waits forever."""
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name.startswith("test-threads_"):
            raise RuntimeError("can't start new thread")
        original(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    pool = SpawningThreads(2, "test-threads")
    try:
        with pytest.raises(RuntimeError, match="can't start new thread"):
            pool.submit(lambda: 1).result(WAIT)
        assert pool.threads == 0
        assert "no thread could be started for queued work" in caplog.text
    finally:
        pool.shutdown()

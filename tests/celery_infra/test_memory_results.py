"""The embedded defaults' result backend (``cache+memory://``) keeps results for their expiry, not
5,000 of them: a long-lived process loses no chord member's result however many tasks it ran."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from celery import chord

from agentloop.orchestration.celery_adapter.embedded import embedded_worker
from agentloop.orchestration.celery_adapter.memory_results import ExpiringMemory, MemoryResultBackend

#: Past Celery's own bound (``celery.backends.cache._DUMMY_CLIENT_CACHE``, an LRU map of 5,000).
MORE_THAN_CELERYS_BOUND = 5_001


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_every_entry_stays_until_its_expiry_however_many_come_after() -> None:
    clock = FakeClock()
    memory = ExpiringMemory(clock)
    for index in range(MORE_THAN_CELERYS_BOUND + 1_000):
        memory.set(f"k{index}", index, 60)
    assert memory.get("k0") == 0 and len(memory) == MORE_THAN_CELERYS_BOUND + 1_000

    clock.now += 60  # the deadline reached: gone, from reads and from memory
    assert memory.get("k0") is None and memory.get_multi(["k1", "k2"]) == {}
    memory.set("fresh", "x", 60)
    assert len(memory) == 1


def test_no_expiry_keeps_an_entry_until_deleted_and_touch_moves_a_deadline() -> None:
    clock = FakeClock()
    memory = ExpiringMemory(clock)
    memory.set("forever", "v", 0)
    memory.set("chord-count", 0, 10)
    assert memory.incr("chord-count") == 1 and memory.incr("chord-count", 2) == 3
    memory.touch("chord-count", 100)
    clock.now += 50
    assert memory.get_multi(["forever", "chord-count", "absent"]) == {"forever": "v", "chord-count": "3"}
    memory.delete("forever")
    assert memory.get("forever") is None
    with pytest.raises(KeyError):
        memory.incr("absent")


def test_the_app_on_the_embedded_defaults_keeps_results_past_celerys_bound(memory_app: Any) -> None:
    backend = memory_app.backend
    assert isinstance(backend, MemoryResultBackend)
    assert memory_app.conf.result_backend == "cache+memory://"  # the public URL is unchanged
    first = str(uuid.uuid4())
    backend.store_result(first, "the first result", "SUCCESS")
    for _ in range(MORE_THAN_CELERYS_BOUND):
        backend.store_result(str(uuid.uuid4()), None, "SUCCESS")
    assert memory_app.AsyncResult(first).get(timeout=1) == "the first result"


def test_a_chord_completes_after_more_results_than_celerys_bound_land_while_it_waits(memory_app: Any) -> None:
    """A member finishes, 5,001 other results land while the last member runs, then the chord's
    body runs with both members' results: with Celery's LRU map the first member's result and the
    group's record were evicted by then, and the chord never completed."""
    release = threading.Event()
    started = threading.Event()

    def quick() -> str:
        return "quick"

    def slow() -> str:
        started.set()
        assert release.wait(timeout=30)
        return "slow"

    def merge(results: list[str]) -> list[str]:
        return results

    memory_app.task(name="test.quick", shared=False)(quick)
    memory_app.task(name="test.slow", shared=False)(slow)
    memory_app.task(name="test.merge", shared=False)(merge)

    with embedded_worker(memory_app, pool="threads", concurrency=2):
        header = [memory_app.signature("test.quick"), memory_app.signature("test.slow")]
        result = chord(header)(memory_app.signature("test.merge"))
        assert started.wait(timeout=10)
        quick_result = result.parent.results[0]
        assert quick_result.get(timeout=10) == "quick"
        for _ in range(MORE_THAN_CELERYS_BOUND):
            memory_app.backend.store_result(str(uuid.uuid4()), None, "SUCCESS")
        release.set()
        assert result.get(timeout=10) == ["quick", "slow"]

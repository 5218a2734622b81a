"""The threads of a threads worker let go of their chords' header results one at a time: they
share one pub/sub connection, which redis-py does not let two threads read at once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentloop.orchestration.celery_adapter.result_channels import _forget


class PubSub:
    def __init__(self) -> None:
        self.pending_unsubscribe_channels: set[str] = set()


class Consumer:
    """The part of Celery's Redis ResultConsumer that forgetting a result touches, counting how
    many threads read its connection at once."""

    def __init__(self) -> None:
        self._pubsub = PubSub()
        self.subscribed_to: set[str] = set()
        self.reading = self.most_reading = 0
        self.counter_lock = threading.Lock()

    def cancel_for(self, task_id: str) -> None:
        self._pubsub.pending_unsubscribe_channels.add(task_id)

    def drain_events(self, timeout: float) -> None:
        with self.counter_lock:
            self.reading += 1
            self.most_reading = max(self.most_reading, self.reading)
        time.sleep(0.01)
        self._pubsub.pending_unsubscribe_channels.clear()
        with self.counter_lock:
            self.reading -= 1


class Backend:
    def __init__(self) -> None:
        self._pending_results: tuple[dict[str, Any], ...] = ({},)

    def get_key_for_task(self, task_id: str) -> str:
        return f"celery-task-meta-{task_id}"


def test_concurrent_forgets_read_the_shared_connection_one_at_a_time() -> None:
    consumer, backend = Consumer(), Backend()

    def forget(n: int) -> None:
        _forget(backend, consumer, {f"celery-task-meta-t{n}"})

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(forget, range(32)))

    assert consumer.most_reading == 1
    assert not consumer._pubsub.pending_unsubscribe_channels

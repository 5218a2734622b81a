"""Wakes of one key in one process are coalesced: while a thread wakes a key, a run of the key
ending elsewhere in the process only asks it to go round once more (counted: the store's wake
calls and the threads that made none)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter import admission
from agentloop.orchestration.store.concurrency import Wake


class BlockingSlots:
    """``wake`` answers one parked run per call; the first call waits for the test."""

    def __init__(self) -> None:
        self.calls = 0
        self.inside = threading.Event()
        self.go_on = threading.Event()

    def wake(
        self, *, fair_slots: int | None = None, keys: list[str] | None = None, kind: str = "run"
    ) -> list[Wake]:
        self.calls += 1
        if self.calls == 1:
            self.inside.set()
            assert self.go_on.wait(timeout=30)
        return [Wake(f"r{self.calls}", "A", {"task": "agentloop.launch", "task_id": f"r{self.calls}"})]


def test_runs_ending_while_their_key_is_woken_make_one_more_round_not_a_wake_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slots, sent = BlockingSlots(), []
    deps = SimpleNamespace(settings=SimpleNamespace(fair_slots=None))
    monkeypatch.setattr(admission, "dependencies_of", lambda app: deps)
    monkeypatch.setattr(admission, "slots_of", lambda deps: slots)
    monkeypatch.setattr(admission, "send_copy", lambda app, message, countdown=None: sent.append(message))
    app: Any = object()
    first: list[int] = []
    waker = threading.Thread(target=lambda: first.append(admission.wake_waiters(app, "A")))
    waker.start()
    assert slots.inside.wait(timeout=30)
    # three more runs of A end while the first wake is in the store: none waits on the key's lock
    assert [admission.wake_waiters(app, "A") for _ in range(3)] == [0, 0, 0]
    assert admission.wake_waiters(app, "B") == 1  # another key is woken at once
    slots.go_on.set()
    waker.join(timeout=30)
    assert slots.calls == 3  # the first wake, B's, and one more round of A's for the three ends
    assert first == [2] and len(sent) == 3

"""A worker freezes its boot-time heap (``celery_adapter/heap.py``); an embedded worker does not."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from celery.contrib.testing.worker import TestWorkController

from agentloop import create_app, load_settings
from agentloop.orchestration.celery_adapter.heap import YOUNG_THRESHOLD, FrozenHeap


@pytest.fixture
def thawed() -> Iterator[None]:
    gc.unfreeze()
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()  # the rest of the test session collects as before
        gc.set_threshold(*threshold)


class _Worker:
    """What the bootstep reads of a worker: nothing but its type."""

    app: Any = None


def test_every_app_has_its_workers_freeze_their_heap() -> None:
    app = create_app(settings=load_settings({}))
    assert FrozenHeap in app.steps["worker"]


def test_a_worker_moves_its_boot_time_objects_out_of_the_collectors_walks(thawed: None) -> None:
    booted = [[] for _ in range(10)]  # stands for the modules a worker has imported
    step = FrozenHeap(_Worker())
    assert gc.get_freeze_count() == 0

    step.start(_Worker())

    assert gc.get_freeze_count() >= len(booted)


def test_a_worker_collects_its_young_objects_less_often(thawed: None) -> None:
    """A pack's branches make many short-lived objects: a young collection every 700 of them
    walked the live ones again and again (``heap.py``)."""
    gc.set_threshold(700, 10, 10)
    FrozenHeap(_Worker()).start(_Worker())
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)

    gc.set_threshold(50_000, 10, 10)  # a process that set it higher keeps its setting
    FrozenHeap(_Worker()).start(_Worker())
    assert gc.get_threshold()[0] == 50_000


def test_an_embedded_worker_leaves_the_collectors_thresholds_alone(thawed: None) -> None:
    gc.set_threshold(700, 10, 10)
    worker = TestWorkController.__new__(TestWorkController)
    FrozenHeap(worker).start(worker)
    assert gc.get_threshold() == (700, 10, 10)


def test_an_embedded_worker_freezes_nothing_of_the_process_it_shares(thawed: None) -> None:
    worker = TestWorkController.__new__(TestWorkController)  # its type is all the step reads
    step = FrozenHeap(worker)

    step.start(worker)

    assert gc.get_freeze_count() == 0


_PRELOAD = """
import sys
from agentloop import create_app, load_settings
from agentloop.orchestration.celery_adapter.heap import FrozenHeap

SDK = "agentloop.orchestration.llm.openai.processor"
app = create_app(settings=load_settings({"OPENAI_API_KEY": "sk-test"}))
before = SDK in sys.modules

class Worker:
    pass

worker = Worker()
worker.app = app
FrozenHeap(worker)
print(before, SDK in sys.modules)
"""


def test_a_worker_imports_its_model_sdk_before_the_pool_forks() -> None:
    """A pool process imported the OpenAI processor at its first model call (1.0-1.5 s at load),
    while the runs sent to it waited: the worker's main process imports it before forking."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _PRELOAD], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]

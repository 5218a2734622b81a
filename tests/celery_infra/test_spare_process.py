"""Which workers keep a spare process beside packs (``celery_adapter/pack_gate.py``): prefork
workers that run packs, with the default prefetch, and no other. The pool grows by one; the
worker's concurrency, from which Celery makes its prefetch, does not."""

from __future__ import annotations

from typing import Any

import pytest
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.concurrency.thread import TaskPool as ThreadsPool

from agentloop import create_app, load_settings
from agentloop.orchestration.celery_adapter.pack_gate import PackGate, SpareProcess, prefetch_limit


class _Worker:
    """What the bootstep reads and writes of a worker (after Celery's ``Pool`` step is made)."""

    def __init__(self, app: Any, pool_cls: Any, concurrency: Any = 2) -> None:
        self.app, self.pool_cls, self.concurrency = app, pool_cls, concurrency
        self.min_concurrency = concurrency


def test_every_app_has_its_workers_keep_a_spare_process_beside_packs() -> None:
    app = create_app(settings=load_settings({}))
    assert SpareProcess in app.steps["worker"]
    assert PackGate in app.steps["consumer"]


def test_a_prefork_worker_starts_one_process_more_and_keeps_its_concurrency() -> None:
    app = create_app(settings=load_settings({}))
    worker = _Worker(app, PreforkPool)
    SpareProcess(worker)
    assert (worker.concurrency, worker.min_concurrency) == (2, 3)
    assert app.agentloop_pack_processes == 2


@pytest.mark.parametrize(
    ("env", "pool", "options"),
    [
        ({}, ThreadsPool, {}),  # a pack holds one thread of many
        ({}, PreforkPool, {"autoscale": "8,2"}),  # the autoscaler owns the pool's size
        ({"AGENTLOOP_PACK_SIZE": "1"}, PreforkPool, {}),  # no packs
        ({"AGENTLOOP_WIRE_VERSION_OVERRIDE": "1"}, PreforkPool, {}),  # a worker before packs
        ({"AGENTLOOP_WORKER_PREFETCH_MULTIPLIER": "4"}, PreforkPool, {}),  # it would run N + 1
    ],
)
def test_other_workers_keep_their_pool(env: dict[str, str], pool: Any, options: dict[str, Any]) -> None:
    app = create_app(settings=load_settings(env))
    worker = _Worker(app, pool)
    SpareProcess(worker, **options)
    assert (worker.concurrency, worker.min_concurrency) == (2, 2)
    assert getattr(app, "agentloop_pack_processes", None) is None


def test_a_consumer_without_a_gate_restores_celerys_prefetch() -> None:
    app = create_app(settings=load_settings({}))

    class Consumer:
        pass

    consumer = Consumer()
    consumer.app = app  # type: ignore[attr-defined]
    assert prefetch_limit(consumer, 3, 2) == 6

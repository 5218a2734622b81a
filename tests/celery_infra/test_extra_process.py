"""Which workers start a process beyond their concurrency for what is not a pack
(``celery_adapter/pack_gate.py``): prefork workers that run packs, and no other."""

from __future__ import annotations

from typing import Any

import pytest
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.concurrency.thread import TaskPool as ThreadsPool

from agentloop import create_app, load_settings
from agentloop.orchestration.celery_adapter.pack_gate import KEPT_PROCESSES, ExtraProcess, PackGate


class _Worker:
    """What the bootstep reads and writes of a worker."""

    def __init__(self, app: Any, pool_cls: Any, concurrency: Any = 2) -> None:
        self.app, self.pool_cls, self.concurrency = app, pool_cls, concurrency


def test_every_app_has_its_workers_keep_a_process_from_packs() -> None:
    app = create_app(settings=load_settings({}))
    assert ExtraProcess in app.steps["worker"]
    assert PackGate in app.steps["consumer"]


def test_a_prefork_worker_starts_one_process_more_and_lets_packs_hold_its_concurrency() -> None:
    app = create_app(settings=load_settings({}))
    worker = _Worker(app, PreforkPool)
    ExtraProcess(worker)
    assert worker.concurrency == 2 + KEPT_PROCESSES
    assert app.agentloop_pack_processes == 2


@pytest.mark.parametrize(
    ("env", "pool", "options"),
    [
        ({}, ThreadsPool, {}),  # a pack holds one thread of many
        ({}, PreforkPool, {"autoscale": "8,2"}),  # the autoscaler owns the pool's size
        ({"AGENTLOOP_PACK_SIZE": "1"}, PreforkPool, {}),  # no packs
        ({"AGENTLOOP_WIRE_VERSION_OVERRIDE": "1"}, PreforkPool, {}),  # a worker before packs
    ],
)
def test_other_workers_keep_their_concurrency(
    env: dict[str, str], pool: Any, options: dict[str, Any]
) -> None:
    app = create_app(settings=load_settings(env))
    worker = _Worker(app, pool)
    ExtraProcess(worker, **options)
    assert worker.concurrency == 2
    assert getattr(app, "agentloop_pack_processes", None) is None

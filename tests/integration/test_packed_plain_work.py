"""Plain-function work in a pack runs off the pack's event loop (``orchestration/packing/threads.py``,
``docs/how-to/packing.md``): with nothing set, the rule packs a composite of a plain ``def
advance_state`` loop, a plain ``@step`` and a coroutine loop together on a real worker, and the
coroutine branch runs (and releases them) while both plain functions are blocked on a
``threading.Event``. On the event loop's thread they would have held it until they gave up."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentloop.orchestration.client import CeleryAgentRunner


@pytest.mark.integration
def test_a_blocked_plain_step_does_not_hold_up_its_packed_siblings(redis_celery: Any) -> None:
    runner = CeleryAgentRunner.create(
        runnable="parity.plain_beside_async", app=redis_celery.app, store=redis_celery.store
    )
    logged = len(redis_celery.worker.log_text())
    handle = runner.request_sync(input=uuid.uuid4().hex)

    assert handle.wait_sync(timeout=60) == {
        "plain_loop": {"released": True},
        "plain_step": {"released": True},
        "releasing": {"released": True},
    }
    log = redis_celery.worker.log_text()[logged:]  # this run's tasks
    assert "agentloop.pack[" in log and "agentloop.lane[" not in log  # all three in one pack

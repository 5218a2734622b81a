"""The typed-steps tests' Celery rig: the embedded defaults running ``typed_workflows``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import open_store
from tests.services.worker_environment import embedded_app


@pytest.fixture(scope="module")
def typed_celery(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``(app, store)``: a ``memory://`` broker, a worker thread, the registry of ``typed_workflows``."""
    folder: Path = tmp_path_factory.mktemp("typed-celery")
    store, _ = open_store(f"sqlite:///{folder / 'runs.sqlite3'}")
    registry = RunnableRegistry.from_modules(["typed_workflows"])
    try:
        with embedded_app(registry, store, name="typed") as (app, _):
            yield app, store
    finally:
        store.engine.dispose()


@pytest.fixture
def watch_logs(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., pytest.LogCaptureFixture]:
    """``watch_logs(*logger_names)``: capture those loggers at INFO and above from now on.

    The capture is attached to each logger itself, enabled: whatever a Celery worker or another
    test did earlier in the session to the root logger, to propagation or to the loggers that
    existed then, their records reach ``caplog``.
    """

    def watch(*names: str) -> pytest.LogCaptureFixture:
        for name in names:
            logger = logging.getLogger(name)
            monkeypatch.setattr(logger, "disabled", False)
            monkeypatch.setattr(logger, "propagate", False)  # the record is captured here, once
            monkeypatch.setattr(logger, "handlers", [*logger.handlers, caplog.handler])
            caplog.set_level(logging.INFO, logger=name)
        return caplog

    return watch

"""The web tests' fixture: a Celery app on the embedded defaults (``memory://``) with a worker
thread and its SQLite run store, shared by the session (helpers are in ``web_support.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("starlette", reason="the web tests need the http extra: pip install 'agentloop[http]'")

from web_support import MODULES, WebRig

from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.store import open_store
from tests.services.worker_environment import embedded_app


@pytest.fixture(scope="session")
def web_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebRig]:
    folder = tmp_path_factory.mktemp("web")
    store, _ = open_store(f"sqlite:///{folder / 'runs.sqlite3'}")
    registry = RunnableRegistry.from_modules(MODULES)
    with embedded_app(registry, store, name="web", concurrency=8, settings=Settings()) as (app, _):
        yield WebRig(app=app, store=store, registry=registry, folder=folder)

"""The web tests' fixture: a Celery app on the embedded defaults (``memory://``) with a worker
thread and its SQLite run store, shared by the session (helpers are in ``web_support.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("starlette", reason="the web tests need the http extra: pip install 'agentloop[http]'")

from web_support import MODULES, WebRig

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.embedded import embedded_worker
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.store import open_store


@pytest.fixture(scope="session")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebRig]:
    folder = tmp_path_factory.mktemp("web")
    store, _ = open_store(f"sqlite:///{folder / 'runs.sqlite3'}")
    registry = RunnableRegistry.from_modules(MODULES)
    app = create_app(
        settings=Settings(),
        registry=registry,
        store=store,
        overrides={
            "broker_url": "memory://",
            "result_backend": "cache+memory://",
            "task_default_queue": f"web-{uuid.uuid4().hex[:8]}",
        },
    )
    try:
        with embedded_worker(app, pool="threads", concurrency=8):
            yield WebRig(app=app, store=store, registry=registry, folder=folder)
    finally:
        app.close()

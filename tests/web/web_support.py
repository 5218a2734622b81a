"""What the web tests share: known tokens, web apps over a Celery rig, a real uvicorn on 127.0.0.1.

(A module of its own, not ``conftest``: test folders each have a ``conftest`` and
only one of them can be imported under that name.)"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette

from orchestration.registry import RunnableRegistry
from orchestration.settings import Settings
from orchestration.settings_http import HttpSettings, parse_scopes, parse_tokens
from orchestration.store import RunStore
from orchestration.web import create_web_app

#: One token per grant the tests use (every scope; one scope each), all of one principal,
#: ``web-tests``, so each reaches the runs the others start (``test_web_ownership.py`` has its own).
TOKENS = {
    "all": "token-with-every-scope-0001",
    "read": "token-with-read-only-00002",
    "start": "token-with-start-only-0003",
    "cancel": "token-with-cancel-only-004",
}
#: The grant of each token of :data:`TOKENS`, as ``AGENTLOOP_HTTP_TOKENS`` writes it after the token.
GRANTS = {
    "all": "read+start+cancel+admin:web-tests",
    "read": "read:web-tests",
    "start": "start:web-tests",
    "cancel": "cancel:web-tests",
}
MODULES = ("web_workflows", "agentloop.examples.record_search.workflows")


def auth(name: str) -> dict[str, str]:
    """The ``Authorization`` header of the token ``name`` of :data:`TOKENS`."""
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def http_settings(**values: Any) -> HttpSettings:
    """HTTP settings with every token of :data:`TOKENS` and its :data:`GRANTS`."""
    tokens = ",".join(f"{token}:{GRANTS[name]}" for name, token in TOKENS.items())
    values.setdefault("tokens", parse_tokens(tokens))
    if isinstance(values.get("anonymous_scopes"), str):
        values["anonymous_scopes"] = parse_scopes(values["anonymous_scopes"], what="test")
    return HttpSettings(**values)


@dataclass
class WebRig:
    """A Celery app with a worker thread, its store and registry, and a web app factory."""

    app: Any
    store: RunStore
    registry: RunnableRegistry
    folder: Path

    def web(
        self, *, keepalive_seconds: float = 15.0, store: RunStore | None = None, **http: Any
    ) -> Starlette:
        settings = Settings(http=http_settings(**({"poll_seconds": 0.05} | http)))
        return create_web_app(
            celery_app=self.app,
            settings=settings,
            store=store,
            keepalive_seconds=keepalive_seconds,
        )

    def gate(self) -> Path:
        """A new gate file path (not yet created): branches of ``web.gated`` wait until it exists."""
        return self.folder / f"gate-{uuid.uuid4().hex}"


@contextmanager
def live_server(app: Starlette) -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        ws="websockets-sansio",
        lifespan="on",
        log_level="warning",
        timeout_graceful_shutdown=2,
        backlog=2048,
        limit_concurrency=None,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


def wait_for(predicate: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; ``AssertionError`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)

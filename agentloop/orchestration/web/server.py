"""Serving a web app with uvicorn, and the one-off token ``agentloop serve`` makes when none is set."""

from __future__ import annotations

import secrets

import uvicorn
from starlette.applications import Starlette

from agentloop.orchestration.settings import Settings
from agentloop.orchestration.settings.http import SCOPES, TokenGrant

__all__ = ["run_server", "uvicorn_config", "with_session_token"]


def with_session_token(settings: Settings) -> tuple[Settings, str | None]:
    """``settings`` unchanged when they configure access; else a copy with one new random token
    holding every scope (for this process only), and that token."""
    if settings.http.is_open:
        return settings, None
    token = secrets.token_urlsafe(24)
    grant = TokenGrant(token=token, scopes=frozenset(SCOPES))  # type: ignore[arg-type]
    http = settings.http.model_copy(update={"tokens": (grant,)})
    return settings.model_copy(update={"http": http}), token


def uvicorn_config(
    app: Starlette, settings: Settings, *, host: str | None = None, port: int | None = None
) -> uvicorn.Config:
    """uvicorn's configuration for ``app``: WebSocket messages bounded like request bodies, open
    streams closed within 5 s of a shutdown, no access log of query strings."""
    return uvicorn.Config(
        app,
        host=host or settings.http.host,
        port=port if port is not None else settings.http.port,
        ws="websockets-sansio",
        ws_max_size=settings.http.max_body_bytes,
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
        server_header=False,
    )


def run_server(config: uvicorn.Config) -> None:
    """Serve until interrupted (Ctrl-C)."""
    uvicorn.Server(config).run()

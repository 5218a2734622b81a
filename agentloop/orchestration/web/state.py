"""What every route reaches through ``request.app.state.web``: the service, the authenticator, the streams."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import HTTPConnection

from agentloop.orchestration.web.auth import Authenticator, Principal
from agentloop.orchestration.web.service import RunService

__all__ = ["WebState", "caller", "web_state"]


@dataclass(frozen=True, kw_only=True, slots=True)
class WebState:
    """The parts of one web app: its :class:`RunService`, its :class:`Authenticator`, and how often
    an idle event stream sends a keep-alive."""

    service: RunService
    auth: Authenticator
    keepalive_seconds: float = 15.0


def web_state(connection: HTTPConnection) -> WebState:
    state = connection.app.state.web
    assert isinstance(state, WebState)
    return state


def caller(connection: HTTPConnection) -> Principal:
    """The caller of a request (401 without a valid token)."""
    return web_state(connection).auth.from_headers(connection.headers)

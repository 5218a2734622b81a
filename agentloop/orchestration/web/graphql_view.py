"""The GraphQL endpoint: Strawberry's ASGI view, closed to callers without a token.

Over HTTP (``POST /graphql``) the ``Authorization`` header is checked before
Strawberry sees the request: a 401 without a valid token. Over WebSocket
(``graphql-transport-ws``, for ``runProgress``) a browser cannot set headers, so
the token may come in the ``connection_init`` payload as
``{"Authorization": "Bearer <token>"}``; without a valid one the connection is
closed with 4403. A WebSocket opened from a page of another origin is refused
unless ``AGENTLOOP_HTTP_CORS_ORIGINS`` lists it (browsers do not apply CORS to
WebSockets). No GraphiQL page: it would load its code from the internet.

A body is read as ``POST /runs`` reads one (``request_limits.parse_json_body``): one that
is not JSON, or nests deeper than a variable may
(:data:`~agentloop.orchestration.web.request_limits.MAX_JSON_DEPTH` levels inside
``variables``), is a 422 answered as a GraphQL error, and so is every
other refusal of the body. Every error in an answer carries an ``extensions.code``:
the service's own (``refusals.py``), else ``GRAPHQL_PARSE_FAILED`` (a syntax error, or
more tokens than the limit), ``GRAPHQL_VALIDATION_FAILED`` (an unknown field, a
query too deep, too many aliases, a variable of the wrong type) or, for an error
while resolving, ``INTERNAL_SERVER_ERROR``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast
from urllib.parse import urlsplit

import strawberry
from cross_web import HTTPException as BodyRefusal
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLHTTPResponse
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types.execution import ExecutionResult
from strawberry.types.unset import UNSET, UnsetType

from agentloop.orchestration.web.refusals import CODES, code_of, error_response
from agentloop.orchestration.web.request_limits import MAX_JSON_DEPTH, parse_json_body
from agentloop.orchestration.web.state import WebState

__all__ = ["GraphQLEndpoint"]


class GraphQLEndpoint(GraphQL[dict[str, Any], None]):
    """``/graphql`` for queries, mutations (HTTP POST) and subscriptions (WebSocket)."""

    def __init__(
        self, schema: strawberry.Schema, *, state: WebState, allowed_origins: tuple[str, ...]
    ) -> None:
        super().__init__(
            schema,
            graphql_ide=None,
            allow_queries_via_get=False,
            keep_alive=True,
            keep_alive_interval=state.keepalive_seconds,
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            connection_init_wait_timeout=timedelta(seconds=10),
            max_subscriptions_per_connection=20,
        )
        self.state, self.allowed_origins = state, allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                self.state.auth.from_headers(HTTPConnection(scope).headers)
            except HTTPException as error:
                await error_response(error)(scope, receive, send)
                return
            try:
                response = await self.run(Request(scope=scope, receive=receive))
            except (HTTPException, BodyRefusal) as error:  # the body, refused before GraphQL reads it
                status = error.status_code
                message = str(error.detail if isinstance(error, HTTPException) else error.reason)
                body = {
                    "errors": [{"message": message, "extensions": {"code": CODES.get(status, "BAD_REQUEST")}}]
                }
                response = JSONResponse(body, status_code=status)
            await response(scope, receive, send)
            return
        elif scope["type"] == "websocket" and not self._origin_allowed(HTTPConnection(scope)):
            await WebSocket(scope, receive, send).close(code=4403, reason="origin not allowed")
            return
        await super().__call__(scope, receive, send)

    def parse_json(self, data: str | bytes) -> Any:
        """The body, checked as ``POST /runs`` checks its own (a variable as deep as an input)."""
        return parse_json_body(data.encode() if isinstance(data, str) else data, max_depth=MAX_JSON_DEPTH + 2)

    async def process_result(self, request: Request, result: ExecutionResult) -> GraphQLHTTPResponse:
        """Strawberry's answer, with a code on each error that has none (see the module doc)."""
        response = await super().process_result(request, result)
        for error in cast(list[dict[str, Any]], response.get("errors") or []):
            extensions = error.setdefault("extensions", {})
            extensions.setdefault("code", _code_of(error))
        return response

    def _origin_allowed(self, connection: HTTPConnection) -> bool:
        origin = connection.headers.get("origin")
        if origin is None or origin in self.allowed_origins:
            return True
        return urlsplit(origin).netloc == connection.headers.get("host")

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket
    ) -> dict[str, Any]:
        principal = None
        if isinstance(request, Request):
            principal = self.state.auth.from_headers(request.headers)
        return {
            "request": request,
            "response": response,
            "service": self.state.service,
            "principal": principal,
        }

    async def on_ws_connect(self, context: dict[str, Any]) -> UnsetType | dict[str, object] | None:
        """Authenticate the socket: the upgrade's ``Authorization`` header, or ``connection_init``'s."""
        params = context.get("connection_params") or {}
        offered = (
            params.get("Authorization", params.get("authorization")) if isinstance(params, dict) else None
        )
        header = context["request"].headers.get("authorization")
        try:
            context["principal"] = self.state.auth.principal(
                header or (offered if isinstance(offered, str) else None)
            )
        except HTTPException as error:
            raise ConnectionRejectionError({"code": code_of(error), "message": error.detail}) from None
        return cast(UnsetType, UNSET)


def _code_of(error: Mapping[str, Any]) -> str:
    """The code of an error Strawberry or graphql-core raised without one."""
    if error.get("path"):
        return "INTERNAL_SERVER_ERROR"
    message = str(error.get("message", ""))
    return "GRAPHQL_PARSE_FAILED" if message.startswith("Syntax Error") else "GRAPHQL_VALIDATION_FAILED"

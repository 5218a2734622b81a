"""The server's limits: body size, JSON shape, identifiers, pages, open streams, GraphQL queries.

Everything a client sends is checked here before it reaches Celery or the run
store: a body over ``AGENTLOOP_HTTP_MAX_BODY_BYTES`` is refused with 413 before
it is read whole, JSON nested deeper than :data:`MAX_JSON_DEPTH` with 422 (deep
nesting is what breaks a worker's pickling and recursion), and every event
stream takes a slot of ``AGENTLOOP_HTTP_MAX_STREAMS`` before its response starts
(503 with ``Retry-After`` when none is left).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Callable
from functools import partial
from typing import Any, Generic, TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.extensions import MaxAliasesLimiter, MaxTokensLimiter, QueryDepthLimiter, SchemaExtension

from agentloop.orchestration.web.refusals import error_body, invalid_input, too_large, unavailable

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_PAGE_SIZE",
    "BodyLimit",
    "HeldStream",
    "StreamSlots",
    "check_identifier",
    "check_json",
    "check_page",
    "check_token_budget",
    "graphql_limits",
]

#: The deepest nesting of objects and lists accepted in an input or a context spec.
MAX_JSON_DEPTH = 64
#: The most runs one page lists, and the furthest a page may start.
MAX_PAGE_SIZE, MAX_OFFSET = 200, 10_000
#: The ``Retry-After`` (seconds) of a stream refused because every slot is taken.
STREAM_RETRY_SECONDS = 1

T = TypeVar("T")
#: Run ids and runnable names: what the run store and the wire accept, and nothing that needs escaping.
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}")
_MAX_BUDGET = 2**62


def check_json(value: Any, *, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``value`` when it is JSON data nested at most ``max_depth`` deep; 422 otherwise."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                raise invalid_input(f"{what} is nested more than {max_depth} levels deep")
            children = item.values() if isinstance(item, dict) else item
            if isinstance(item, dict) and not all(isinstance(key, str) for key in item):
                raise invalid_input(f"{what} has an object key that is not a string")
            stack.extend((child, depth + 1) for child in children)
        elif not (item is None or isinstance(item, str | int | float | bool)):
            raise invalid_input(f"{what} is not JSON data ({type(item).__name__})")
        elif isinstance(item, str) and "\x00" in item:
            raise invalid_input(f"{what} holds a NUL character")
    return value


def check_identifier(value: Any, *, what: str) -> str:
    """A run id or runnable name: 1 to 200 letters, digits and ``._:@/-``, starting with a letter or digit."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise invalid_input(f"{what} must be 1 to 200 characters of letters, digits and ._:@/- ")
    return value


def check_token_budget(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_BUDGET:
        raise invalid_input(f"token_budget must be an integer from 0 to 2^62, not {value!r}")
    return value


def check_page(limit: Any, offset: Any) -> tuple[int, int]:
    """``(limit, offset)`` of a runs page, each within its bound."""
    for name, value, high in (("limit", limit, MAX_PAGE_SIZE), ("offset", offset, MAX_OFFSET)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
            raise invalid_input(f"{name} must be an integer from 0 to {high}, not {value!r}")
    return int(limit), int(offset)


def parse_json_body(body: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A request body as JSON; 422 when it is not JSON or nests deeper than ``max_depth`` levels."""
    try:
        value = json.loads(body or b"null")
    except RecursionError:  # the decoder's own limit, far deeper than ours
        raise invalid_input(f"the body is nested more than {max_depth} levels deep") from None
    except ValueError:
        raise invalid_input("the body is not JSON") from None
    return check_json(value, what="the body", max_depth=max_depth)


class StreamSlots:
    """At most ``limit`` event streams open at once in this process."""

    def __init__(self, limit: int) -> None:
        self.limit, self.open = limit, 0

    def hold(self, items: AsyncGenerator[T, None]) -> HeldStream[T]:
        """``items`` holding a slot taken now, while a refusal is still an answer: 503 (with
        ``Retry-After``) when every slot is taken. The slot goes back when the stream ends or is
        closed, whether it started or not."""
        if self.open >= self.limit:
            message = f"{self.limit} event streams are open already; try again later"
            raise unavailable(message, retry_after=STREAM_RETRY_SECONDS)
        self.open += 1
        return HeldStream(items, self._release)

    def _release(self) -> None:
        self.open -= 1


class HeldStream(Generic[T]):
    """An event stream holding a slot of :class:`StreamSlots`, given back once: when the stream
    ends, fails or is closed (``aclose``), started or not."""

    def __init__(self, items: AsyncGenerator[T, None], release: Callable[[], None]) -> None:
        self._items, self._release, self._held = items, release, True

    def __aiter__(self) -> HeldStream[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await anext(self._items)
        except BaseException:  # the end, a failure or a cancel: the stream is over
            self._give_back()
            raise

    async def aclose(self) -> None:
        try:
            await self._items.aclose()
        finally:
            self._give_back()

    def _give_back(self) -> None:
        if self._held:
            self._held = False
            self._release()


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 before it is read whole.

    The body is read here (up to the limit) and handed on in one message; later
    ``receive`` calls (a stream waiting for the client to leave) reach the server.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await _refuse(send, self.max_bytes)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await _refuse(send, self.max_bytes)
                return
            if not message.get("more_body", False):
                break
        first: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> Message:
            return first.pop() if first else await receive()

        await self.app(scope, replay, send)


async def _refuse(send: Send, max_bytes: int) -> None:
    body = json.dumps(error_body(too_large(f"the body is over {max_bytes} bytes"))).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def graphql_limits() -> list[Callable[[], SchemaExtension]]:
    """Strawberry's validation limits, built anew for each request: query depth, aliases and tokens
    of one document."""
    return [
        partial(QueryDepthLimiter, max_depth=8),
        partial(MaxAliasesLimiter, max_alias_count=15),
        partial(MaxTokensLimiter, max_token_count=1000),
    ]

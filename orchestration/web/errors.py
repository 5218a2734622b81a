"""What a request can be refused for, once for both fronts: an HTTP status and a GraphQL code.

The routes (``rest.py``, ``sse.py``) answer an :class:`ApiError` as
``{"error": {"code", "message"}}`` with its ``status``; the GraphQL schema
raises it as a GraphQL error whose ``extensions.code`` is its ``code``.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ApiError",
    "Conflict",
    "Forbidden",
    "InvalidInput",
    "NotFound",
    "TooLarge",
    "Unauthenticated",
    "Unavailable",
]


class ApiError(Exception):
    """A refused request: ``status`` for HTTP, ``code`` for GraphQL, ``message`` for people."""

    status: ClassVar[int] = 400
    code: ClassVar[str] = "BAD_REQUEST"

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)

    def to_json(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


class Unauthenticated(ApiError):
    """No token, or a token that is not one of the configured ones."""

    status, code = 401, "UNAUTHENTICATED"


class Forbidden(ApiError):
    """A valid token without the scope the request needs."""

    status, code = 403, "FORBIDDEN"


class NotFound(ApiError):
    status, code = 404, "NOT_FOUND"


class Conflict(ApiError):
    """The run id is taken by another workflow, or the run has already ended."""

    status, code = 409, "CONFLICT"


class TooLarge(ApiError):
    status, code = 413, "PAYLOAD_TOO_LARGE"


class InvalidInput(ApiError):
    status, code = 422, "BAD_USER_INPUT"


class Unavailable(ApiError):
    """Too many event streams open in this process."""

    status, code = 503, "UNAVAILABLE"

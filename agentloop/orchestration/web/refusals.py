"""Why a request is refused: an HTTP status, a GraphQL code and a message, raised as Starlette's
``HTTPException``.

A refusal never leaves this adapter as an error a user catches: the routes
answer it as ``{"error": {"code", "message"}}`` with its status
(:func:`error_response`), the GraphQL schema as an error whose
``extensions.code`` is :func:`code_of` it. So the framework defines no
exception type for it (its one error tree is for what a user catches) and uses
the web framework's own, made by the functions below.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

__all__ = [
    "code_of",
    "conflict",
    "error_body",
    "error_response",
    "forbidden",
    "invalid_input",
    "not_found",
    "not_installed",
    "too_large",
    "unauthenticated",
    "unavailable",
    "unsupported_media_type",
]

#: The GraphQL ``extensions.code`` (and the JSON ``error.code``) of each status.
CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "BAD_USER_INPUT",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
}


def unauthenticated(message: str) -> HTTPException:
    """No token, or one that is not configured (401, with ``WWW-Authenticate: Bearer``)."""
    return HTTPException(401, message, headers={"WWW-Authenticate": 'Bearer realm="agentloop"'})


def forbidden(message: str) -> HTTPException:
    """A valid token without the scope the request needs (403)."""
    return HTTPException(403, message)


def not_found(message: str) -> HTTPException:
    return HTTPException(404, message)


def conflict(message: str) -> HTTPException:
    """The run id belongs to another workflow, or the run has already ended (409)."""
    return HTTPException(409, message)


def too_large(message: str) -> HTTPException:
    return HTTPException(413, message)


def unsupported_media_type(message: str) -> HTTPException:
    return HTTPException(415, message)


def invalid_input(message: str) -> HTTPException:
    """A field, a body or a parameter the API does not accept (422)."""
    return HTTPException(422, message)


def unavailable(message: str, *, retry_after: int | None = None) -> HTTPException:
    """The server cannot serve this now (503): every event stream slot of this process is taken, or
    no worker answered; ``retry_after`` (seconds) is sent as ``Retry-After``."""
    headers = None if retry_after is None else {"Retry-After": str(retry_after)}
    return HTTPException(503, message, headers=headers)


def not_installed(message: str) -> HTTPException:
    """A route whose optional extra is not installed (501)."""
    return HTTPException(501, message)


def code_of(error: HTTPException) -> str:
    return CODES.get(error.status_code, f"HTTP_{error.status_code}")


def error_body(error: HTTPException) -> dict[str, dict[str, str]]:
    return {"error": {"code": code_of(error), "message": str(error.detail)}}


def error_response(error: HTTPException) -> JSONResponse:
    """The JSON answer to a refusal, with its status and headers."""
    return JSONResponse(error_body(error), status_code=error.status_code, headers=error.headers)

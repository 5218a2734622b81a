"""What a failed Messages API call says: the ``anthropic`` SDK's exceptions as short messages.

The Anthropic processor returns every failure as :meth:`AiResponse.failure`;
this module writes its message. :func:`describe_error` names the failure
(``"429 rate limited after 4 attempts: slow down"``, ``"request timed out after
2 attempts (timeout 5s)"``); :func:`failure_message` prefixes ``anthropic:``,
folds whitespace, removes secrets and bounds the length.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from anthropic import (
    AnthropicError,
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
)

from orchestration.llm.openai_errors import redact_secrets

__all__ = ["describe_error", "failure_message"]

_MAX_DETAIL = 200  # characters of a server's error message kept
_MAX_MESSAGE = 400  # characters of a whole failure message
_STATUS_LABELS = {
    400: "bad request",
    401: "authentication failed",
    403: "permission denied",
    404: "not found",
    408: "request timeout",
    409: "conflict",
    413: "request too large",
    422: "unprocessable request",
    429: "rate limited",
    529: "overloaded",
}


def describe_error(error: Exception, *, timeout: timedelta | None) -> str:
    """What went wrong in one ``messages.create`` call (``timeout``: the per-attempt limit)."""
    if isinstance(error, APIStatusError):
        status = error.status_code
        label = _STATUS_LABELS.get(status) or ("server error" if status >= 500 else "HTTP error")
        detail = _error_detail(error.body)
        return f"{status} {label}{_attempts(error.response.request)}" + (f": {detail}" if detail else "")
    if isinstance(error, APITimeoutError):  # before APIConnectionError, its base class
        limit = f" (timeout {timeout.total_seconds():g}s)" if timeout is not None else ""
        return f"request timed out{_attempts(error.request)}{limit}"
    if isinstance(error, APIConnectionError):
        cause = error.__cause__
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else error.message
        return f"connection error{_attempts(error.request)}: {detail}"
    if isinstance(error, APIResponseValidationError):
        return f"invalid response: {error.message}"
    if isinstance(error, AnthropicError):
        return f"{type(error).__name__}: {error}"
    return f"unexpected {type(error).__name__}: {error}"


def failure_message(message: str, *, api_key: str | None) -> str:
    """``anthropic: <message>`` on one line, without secrets, at most 400 characters."""
    text = redact_secrets(f"anthropic: {' '.join(message.split())}", api_key=api_key)
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def _attempts(request: Any) -> str:
    """`` after N attempts``, from the SDK's ``x-stainless-retry-count`` header on the last request."""
    headers = getattr(request, "headers", None)
    try:
        attempts = int(headers.get("x-stainless-retry-count")) + 1 if headers is not None else None
    except (TypeError, ValueError):
        attempts = None
    if attempts is None:
        return ""
    return f" after {attempts} attempt" + ("" if attempts == 1 else "s")


def _error_detail(body: object) -> str:
    """The message of Anthropic's error body ``{"type": "error", "error": {"type", "message"}}``."""
    detail: Any = None
    if isinstance(body, Mapping):
        inner = body.get("error")
        detail = inner.get("message") if isinstance(inner, Mapping) else body.get("message")
    elif isinstance(body, str):
        detail = body
    text = " ".join(str(detail).split()) if detail else ""
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 1] + "…"

"""What a failed call of a provider's official SDK says, as one short message without secrets.

The OpenAI and Anthropic SDKs are generated alike: the same exception classes (a status error,
a timeout below a connection error, a response-validation error, one base), the same retry-count
header. :class:`SdkErrors` holds one SDK's classes and writes its messages
(``"429 rate limited after 4 attempts: slow down"``, ``"request timed out after 2 attempts
(timeout 5s)"``); :func:`redact_secrets` takes out what a server or a library echoed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

__all__ = ["STATUS_LABELS", "SdkErrors", "redact_secrets"]

_MAX_DETAIL = 200  # characters of a server's error message kept
_MAX_MESSAGE = 400  # characters of a whole failure message
#: What an HTTP status means, in a failure message.
STATUS_LABELS: Mapping[int, str] = MappingProxyType(
    {
        400: "bad request",
        401: "authentication failed",
        403: "permission denied",
        404: "not found",
        408: "request timeout",
        409: "conflict",
        413: "request too large",
        422: "unprocessable request",
        429: "rate limited",
    }
)
#: Names under which a secret is echoed: ``key=...``, ``"api_key": "..."``, ``x-api-key: ...``.
_SECRET_NAMES = (
    r"(?:x[-_])?api[-_]?key|key|secret|client[-_]secret|password|passwd|pwd"
    r"|(?:access|auth|refresh|session|id)[-_]?token|token"
)
_NAMED_SECRET = re.compile(
    rf"""(?ix)
    (?P<name>(?<![\w-])(?:{_SECRET_NAMES}))   # a name, not the tail of a longer word
    (?P<sep>["']?\s*[:=]\s*["']?)             # = or :, maybe quoted either side
    (?!\[redacted\])(?P<value>[^\s"'&,;)}}\]]+) # the value, up to a delimiter
    """
)
_AUTHORIZATION = re.compile(
    r"""(?ix)
    (?P<name>(?<![\w-])(?:proxy-)?authorization["']?\s*[:=]\s*["']?)
    (?P<scheme>(?:bearer|basic|token|digest)\s+)?
    (?!\[redacted\])(?P<value>[^\s"',;]+)
    """
)
_BEARER = re.compile(r"(?i)\bbearer\s+[^\s\"',;]+")
_SECRET_KEY = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")
_REDACTED = "[redacted]"
#: The HTTP libraries the SDKs run on, whose ``TransportError`` is a connection failing mid-body.
_HTTP_LIBRARIES = frozenset({"httpx", "httpx2"})
#: A configured secret at least this long is taken out wherever it appears; a shorter one only where
#: it stands as a whole token, so ``ANTHROPIC_API_KEY=x`` leaves "exceeded" a word.
_ANYWHERE_CHARS = 8
_TOKEN_CHAR = r"[A-Za-z0-9_\-]"


@dataclass(frozen=True, kw_only=True)
class SdkErrors:
    """One SDK's exception classes, and how its failures read."""

    provider: str  # the prefix of every message, e.g. ``openai``
    base: type[Exception]
    status: type[Exception]
    timeout: type[Exception]  # a subclass of ``connection``: checked first
    connection: type[Exception]
    validation: type[Exception]
    #: The server's message in an error body (a mapping or a string).
    body_message: Callable[[Mapping[str, Any]], Any]
    status_labels: Mapping[int, str] = field(default_factory=lambda: STATUS_LABELS)

    def broke_stream(self, error: BaseException) -> bool:
        """Whether ``error`` broke a stream part-way and is worth reading again: a dropped
        connection or a read timeout (a stalled stream), as the SDK wraps it or as its HTTP
        library (``httpx``, or the ``httpx2`` newer SDKs run on) raised it mid-body."""
        return isinstance(error, self.connection) or any(
            kind.__name__ == "TransportError" and kind.__module__.split(".")[0] in _HTTP_LIBRARIES
            for kind in type(error).__mro__
        )

    def describe(self, error: Exception, *, timeout: timedelta | None) -> str:
        """What went wrong in one call (``timeout``: the per-attempt limit)."""
        failure: Any = error
        if isinstance(error, self.status):
            status = failure.status_code
            if status < 400:  # an error event in a stream that began well
                return f"error event in the stream: {self._detail(failure.body) or error}"
            label = self.status_labels.get(status) or ("server error" if status >= 500 else "HTTP error")
            detail = self._detail(failure.body)
            return f"{status} {label}{_attempts(failure.response.request)}" + (
                f": {detail}" if detail else ""
            )
        if isinstance(error, self.timeout):
            limit = f" (timeout {timeout.total_seconds():g}s)" if timeout is not None else ""
            return f"request timed out{_attempts(failure.request)}{limit}"
        if isinstance(error, self.connection):
            cause = error.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else failure.message
            return f"connection error{_attempts(failure.request)}: {detail}"
        if isinstance(error, self.validation):
            return f"invalid response: {failure.message}"
        if isinstance(error, self.base):
            return f"{type(error).__name__}: {error}"
        return f"unexpected {type(error).__name__}: {error}"

    def failure_message(self, message: str, *, api_key: str | None) -> str:
        """``<provider>: <message>`` on one line, without secrets, at most 400 characters."""
        text = redact_secrets(f"{self.provider}: {' '.join(message.split())}", api_key=api_key)
        return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"

    def _detail(self, body: object) -> str:
        detail = (
            self.body_message(body) if isinstance(body, Mapping) else body if isinstance(body, str) else None
        )
        text = " ".join(str(detail).split()) if detail else ""
        return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 1] + "…"


def redact_secrets(text: str, *, api_key: str | None) -> str:
    """``text`` without a secret that a server or a library echoed into it.

    Gone are: the configured ``api_key``'s full value (as is, URL-encoded or
    JSON-escaped), wherever it appears when it has 8 characters or more, else
    where it stands as a whole token (never a piece of a word); the value of an
    ``Authorization`` header and of any bearer token; the value given under a
    secret's name (``key=...``, ``api_key=...``, ``"api-key": "..."``,
    ``x-api-key: ...``, ``token=...``, ``password: ...``);
    and anything shaped like a provider's key (``sk-...``), whatever its name.
    """
    if api_key:
        for form in {api_key, quote(api_key, safe=""), json.dumps(api_key)[1:-1]}:
            if len(form) >= _ANYWHERE_CHARS:
                text = text.replace(form, _REDACTED)
            else:
                text = re.sub(rf"(?<!{_TOKEN_CHAR}){re.escape(form)}(?!{_TOKEN_CHAR})", _REDACTED, text)
    text = _AUTHORIZATION.sub(lambda m: f"{m['name']}{m['scheme'] or ''}{_REDACTED}", text)
    text = _BEARER.sub(f"Bearer {_REDACTED}", text)
    text = _NAMED_SECRET.sub(lambda m: f"{m['name']}{m['sep']}{_REDACTED}", text)
    return _SECRET_KEY.sub(f"sk-{_REDACTED}", text)


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

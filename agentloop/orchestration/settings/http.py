"""``agentloop serve``'s settings: who may do what over HTTP, and the server's limits.

Closed by default: with no token and no anonymous scope, every route answers
401. A token speaks for a *principal* and grants scopes:

* ``read``: inputs, results, errors and event texts;
* ``start``: start runs of registered runnables, and answer a paused run's question;
* ``cancel``: cancel runs;
* ``admin``: the other scopes reach every run, not only the principal's own;
* ``metrics``: ``GET /metrics``, the counts of every principal's runs, for Prometheus.

A run started over HTTP records the caller's principal. Without ``admin`` a
token sees and acts on its principal's runs only (the others answer 404, as a
run that does not exist); runs started another way (CLI, Celery clients, beat)
have no principal and only ``admin`` tokens reach them. On the runs it reaches,
a token sees what Flower shows of a run: its id, runnable, status, timestamps,
usage and where its events are; inputs, results and event texts only with
``read``.

``AGENTLOOP_HTTP_TOKENS`` is a comma-separated list of ``TOKEN`` (every scope,
``admin`` included), ``TOKEN:scope+scope`` or ``TOKEN:scope+scope:PRINCIPAL``
entries, e.g. ``s3cret-for-ops-team:read+cancel+admin:ops,
s3cret-for-the-shop:read+start:shop``. A token is at least
:data:`MIN_TOKEN_CHARS` characters and holds no ``,``, ``:`` or blank. Tokens
naming the same principal share its runs (two tokens of one service, a rotated
token); a token naming none is its own principal, ``token-`` and a digest of
it (:func:`~agentloop.orchestration.web.auth.token_principal`), never the token itself.
A principal name is 1 to 64 of ``A-Za-z0-9._@-``; ``anonymous`` (the caller
without a token) and names starting with ``token-`` are reserved.
``AGENTLOOP_HTTP_ANONYMOUS_SCOPES`` never grants ``admin``: it needs a token.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationInfo, field_validator
from pydantic_settings import NoDecode

from agentloop.orchestration.settings.group import SettingsGroup, as_float, count, env_field

__all__ = [
    "ANONYMOUS",
    "MIN_TOKEN_CHARS",
    "SCOPES",
    "HttpSettings",
    "TokenGrant",
    "parse_scopes",
    "parse_tokens",
]

#: The scopes a token may hold, in the order they are shown.
SCOPES: tuple[str, ...] = ("read", "start", "cancel", "admin", "metrics")
#: The principal of a caller without a token (``AGENTLOOP_HTTP_ANONYMOUS_SCOPES``).
ANONYMOUS = "anonymous"
#: The shortest token accepted: a guessable token is refused at start-up, not found by an attacker.
MIN_TOKEN_CHARS = 16
_TOKEN = re.compile(r"[^\s,:]+")
_PRINCIPAL = re.compile(r"[A-Za-z0-9._@-]{1,64}")


class TokenGrant(BaseModel):
    """One bearer token, the scopes it grants and the principal it names (``None``: the token is
    its own principal); ``repr`` never shows the token."""

    model_config = ConfigDict(frozen=True)

    token: SecretStr
    scopes: frozenset[str]
    principal: str | None = None


def parse_scopes(text: str, *, what: str) -> frozenset[str]:
    """Scopes written as ``read+start`` (or with commas or blanks); ``ValueError`` naming an unknown one."""
    names = [name for name in re.split(r"[+,\s]+", text.strip()) if name]
    unknown = sorted(set(names) - set(SCOPES))
    if unknown:
        raise ValueError(f"{what}: unknown scope(s) {', '.join(unknown)}; the scopes are {', '.join(SCOPES)}")
    return frozenset(names)


def _principal_name(text: str, *, what: str) -> str:
    """A principal name a token entry gives; ``ValueError`` for a malformed or reserved one."""
    name = text.strip()
    if not _PRINCIPAL.fullmatch(name):
        raise ValueError(f"{what}: a principal is 1 to 64 of A-Za-z0-9._@- after the second ':'")
    if name == ANONYMOUS or name.startswith("token-"):
        raise ValueError(f"{what}: the principal names {ANONYMOUS!r} and 'token-...' are reserved")
    return name


def parse_tokens(text: str) -> tuple[TokenGrant, ...]:
    """``AGENTLOOP_HTTP_TOKENS`` as grants; ``ValueError`` saying what is wrong, never showing a token."""
    grants: list[TokenGrant] = []
    for position, entry in enumerate((part.strip() for part in text.split(",")), start=1):
        if not entry:
            continue
        token, *rest = entry.split(":")
        token = token.strip()
        where = f"AGENTLOOP_HTTP_TOKENS entry {position}"
        if not _TOKEN.fullmatch(token) or len(token) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"{where}: a token is at least {MIN_TOKEN_CHARS} characters with no blank, ',' or ':'"
            )
        if len(rest) > 2:
            raise ValueError(f"{where}: an entry is TOKEN, TOKEN:scopes or TOKEN:scopes:principal")
        granted = parse_scopes(rest[0], what=where) if rest else frozenset(SCOPES)
        if not granted:
            raise ValueError(f"{where}: name at least one scope after ':' ({', '.join(SCOPES)})")
        principal = _principal_name(rest[1], what=where) if len(rest) == 2 else None
        grants.append(TokenGrant(token=SecretStr(token), scopes=granted, principal=principal))
    if len({grant.token.get_secret_value() for grant in grants}) != len(grants):
        raise ValueError("AGENTLOOP_HTTP_TOKENS lists one token twice")
    return tuple(grants)


class HttpSettings(SettingsGroup):
    """The HTTP adapter's settings (see the module doc); frozen, and closed by default."""

    _URL_FIELDS: ClassVar[frozenset[str]] = frozenset()

    tokens: Annotated[tuple[TokenGrant, ...], NoDecode] = env_field("AGENTLOOP_HTTP_TOKENS", ())
    """``AGENTLOOP_HTTP_TOKENS``: bearer tokens and their scopes. Default: none (every route refuses)."""
    anonymous_scopes: Annotated[frozenset[str], NoDecode] = env_field(
        "AGENTLOOP_HTTP_ANONYMOUS_SCOPES", frozenset()
    )
    """``AGENTLOOP_HTTP_ANONYMOUS_SCOPES``: scopes granted without a token, e.g. ``read``. Default: none."""
    cors_origins: Annotated[tuple[str, ...], NoDecode] = env_field("AGENTLOOP_HTTP_CORS_ORIGINS", ())
    """``AGENTLOOP_HTTP_CORS_ORIGINS``: comma-separated origins browsers may call from. Default: none
    (CORS off)."""
    max_body_bytes: int = env_field("AGENTLOOP_HTTP_MAX_BODY_BYTES", 1_048_576)
    """``AGENTLOOP_HTTP_MAX_BODY_BYTES``: the largest request body accepted. Default: ``1048576`` (1 MiB)."""
    host: str = env_field("AGENTLOOP_HTTP_HOST", "127.0.0.1")
    """``AGENTLOOP_HTTP_HOST``: the address ``agentloop serve`` listens on. Default: ``127.0.0.1``."""
    port: int = env_field("AGENTLOOP_HTTP_PORT", 8000)
    """``AGENTLOOP_HTTP_PORT``: its port. Default: ``8000``."""
    poll_seconds: float = env_field("AGENTLOOP_HTTP_POLL_SECONDS", 0.25)
    """``AGENTLOOP_HTTP_POLL_SECONDS``: how often a followed run's new events are read from the run
    store (once per run, whatever the number of clients). Default: ``0.25``."""
    max_streams: int = env_field("AGENTLOOP_HTTP_MAX_STREAMS", 1000)
    """``AGENTLOOP_HTTP_MAX_STREAMS``: event streams (SSE and subscriptions) open at once in one
    process; more are refused with 503. Default: ``1000``."""

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens(cls, value: Any) -> Any:
        return parse_tokens(value) if isinstance(value, str) else value

    @field_validator("anonymous_scopes", mode="before")
    @classmethod
    def _anonymous(cls, value: Any) -> Any:
        scopes = (
            parse_scopes(value, what="AGENTLOOP_HTTP_ANONYMOUS_SCOPES") if isinstance(value, str) else value
        )
        if isinstance(scopes, frozenset | set | tuple | list) and "admin" in scopes:
            raise ValueError("AGENTLOOP_HTTP_ANONYMOUS_SCOPES cannot grant admin: give it to a token")
        return scopes

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> Any:
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, list | tuple):
            return tuple(item.strip() for item in items if isinstance(item, str) and item.strip())
        return items

    @field_validator("max_body_bytes", "port", "max_streams", mode="before")
    @classmethod
    def _positive(cls, value: Any, info: ValidationInfo) -> int:
        name = cls.env_name(info.field_name)
        number = count(value, name, least=1)
        if info.field_name == "port" and number > 65535:
            raise ValueError(f"{name} must be a port number (1-65535), not {value!r}")
        return number

    @field_validator("poll_seconds", mode="before")
    @classmethod
    def _poll(cls, value: Any) -> float:
        number = as_float(value)
        if number is None or not 0 < number <= 60 or math.isinf(number):
            raise ValueError(
                f"AGENTLOOP_HTTP_POLL_SECONDS must be a number of seconds in (0, 60], not {value!r}"
            )
        return number

    @property
    def is_open(self) -> bool:
        """Whether anything is reachable at all (a token or an anonymous scope is configured)."""
        return bool(self.tokens or self.anonymous_scopes)

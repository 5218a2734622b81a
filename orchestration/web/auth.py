"""Who is asking: bearer tokens and their scopes (``AGENTLOOP_HTTP_TOKENS``), closed by default.

:meth:`Authenticator.principal` turns an ``Authorization`` header into a
:class:`Principal`: a configured token's scopes, or the anonymous scopes when
no header is given and ``AGENTLOOP_HTTP_ANONYMOUS_SCOPES`` grants some. A
wrong token never falls back to the anonymous scopes. Tokens are compared in
constant time. With nothing configured every request is
401.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from agentloop.orchestration.settings_http import HttpSettings
from agentloop.orchestration.web.errors import forbidden, unauthenticated

__all__ = ["READ", "START", "CANCEL", "Authenticator", "Principal", "bearer_token"]

READ, START, CANCEL = "read", "start", "cancel"


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """The caller: which token (by position, never its text) and the scopes it holds."""

    name: str
    scopes: frozenset[str]

    @property
    def can_read(self) -> bool:
        """Whether inputs, results and event texts may be shown to this caller."""
        return READ in self.scopes

    def require(self, scope: str) -> None:
        """403 unless the caller holds ``scope``."""
        if scope not in self.scopes:
            raise forbidden(f"this token lacks the {scope!r} scope")


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value; ``None`` without one.

    A value in another scheme, or an empty bearer, is 401.
    """
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise unauthenticated("use 'Authorization: Bearer <token>'")
    return token


class Authenticator:
    """Checks tokens against the configured grants."""

    def __init__(self, settings: HttpSettings) -> None:
        self._grants = tuple(
            (grant.token.get_secret_value().encode(), grant.scopes, f"token {position}")
            for position, grant in enumerate(settings.tokens, start=1)
        )
        self._anonymous = frozenset(settings.anonymous_scopes)

    def principal(self, authorization: str | None) -> Principal:
        """The caller with this ``Authorization`` value, or 401."""
        token = bearer_token(authorization)
        if token is None:
            if self._anonymous:
                return Principal(name="anonymous", scopes=self._anonymous)
            raise unauthenticated("a bearer token is required (Authorization: Bearer <token>)")
        offered = token.encode()
        found: Principal | None = None
        for secret, scopes, name in self._grants:  # every grant compared: the time says nothing
            if hmac.compare_digest(secret, offered) and found is None:
                found = Principal(name=name, scopes=scopes)
        if found is None:
            raise unauthenticated("unknown token")
        return found

    def from_headers(self, headers: Mapping[str, str]) -> Principal:
        """The caller of a request with these headers."""
        return self.principal(headers.get("authorization"))

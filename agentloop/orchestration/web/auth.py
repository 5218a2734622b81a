"""Who is asking: bearer tokens, their principals and scopes (``AGENTLOOP_HTTP_TOKENS``), closed by default.

:meth:`Authenticator.principal` turns an ``Authorization`` header into a
:class:`Principal`: a configured token's principal and scopes, or the
anonymous scopes (principal ``anonymous``) when no header is given and
``AGENTLOOP_HTTP_ANONYMOUS_SCOPES`` grants some. A wrong token never falls
back to the anonymous scopes. Tokens are compared in constant time. With
nothing configured every request is 401.

The ownership rule (:meth:`Principal.may_act_on`): a run started over HTTP
records its caller's principal, and a token reads, follows, cancels and
answers only its principal's runs, unless it holds ``admin``. A run without a
principal (started by the CLI, a Celery client, beat) is reachable by ``admin``
tokens only.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from agentloop.orchestration.settings.http import ANONYMOUS, HttpSettings
from agentloop.orchestration.web.refusals import forbidden, unauthenticated

__all__ = [
    "ADMIN",
    "CANCEL",
    "METRICS",
    "READ",
    "START",
    "Authenticator",
    "Principal",
    "bearer_token",
    "token_principal",
]

READ, START, CANCEL, ADMIN, METRICS = "read", "start", "cancel", "admin", "metrics"
#: PBKDF2 rounds of a token's principal digest: a leaked run table does not make a weak token
#: cheap to guess.
_DIGEST_ROUNDS = 100_000


def token_principal(token: str) -> str:
    """The principal of a token whose entry names none: ``token-`` and 16 hex digits of a slow,
    salted digest of it (stable across restarts and reordered entries; never the token)."""
    digest = hashlib.pbkdf2_hmac("sha256", token.encode(), b"agentloop-principal", _DIGEST_ROUNDS, dklen=8)
    return f"token-{digest.hex()}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """The caller: its principal (a configured name, a digest of its token, or ``anonymous``;
    never the token's text) and the scopes it holds."""

    name: str
    scopes: frozenset[str]

    @property
    def can_read(self) -> bool:
        """Whether inputs, results and event texts may be shown to this caller."""
        return READ in self.scopes

    @property
    def is_admin(self) -> bool:
        """Whether this caller's scopes reach every run, not only its principal's."""
        return ADMIN in self.scopes

    def may_act_on(self, run_principal: str | None) -> bool:
        """Whether this caller may reach a run started by ``run_principal`` (``None``: not over HTTP)."""
        return self.is_admin or (run_principal is not None and run_principal == self.name)

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
            (
                grant.token.get_secret_value().encode(),
                grant.scopes,
                grant.principal or token_principal(grant.token.get_secret_value()),
            )
            for grant in settings.tokens
        )
        self._anonymous = frozenset(settings.anonymous_scopes)

    def principal(self, authorization: str | None) -> Principal:
        """The caller with this ``Authorization`` value, or 401."""
        token = bearer_token(authorization)
        if token is None:
            if self._anonymous:
                return Principal(name=ANONYMOUS, scopes=self._anonymous)
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

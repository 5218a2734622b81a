"""``HttpSettings``: tokens and scopes from the environment, closed by default, clear errors."""

from __future__ import annotations

import pytest

from agentloop.orchestration.errors import SettingsError
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.web.auth import Authenticator


def test_nothing_set_is_closed_on_the_loopback_address() -> None:
    http = load_settings({}).http
    assert (http.tokens, http.anonymous_scopes, http.cors_origins) == ((), frozenset(), ())
    assert not http.is_open
    assert (http.host, http.port, http.max_body_bytes) == ("127.0.0.1", 8000, 1_048_576)


def test_a_token_alone_holds_every_scope_and_scopes_can_be_narrowed() -> None:
    http = load_settings({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop, qrstuvwxyz012345:read+cancel"}).http
    assert [sorted(grant.scopes) for grant in http.tokens] == [
        ["admin", "cancel", "metrics", "read", "start"],
        ["cancel", "read"],
    ]
    assert [grant.principal for grant in http.tokens] == [None, None]
    assert http.is_open
    assert "abcdefghijklmnop" not in repr(http) and "qrstuvwxyz012345" not in str(http)


def test_a_token_may_name_its_principal_and_several_tokens_may_share_one() -> None:
    entries = "abcdefghijklmnop:read+start:shop, qrstuvwxyz012345:start:shop, 0123456789abcdef:read+admin:ops"
    http = load_settings({"AGENTLOOP_HTTP_TOKENS": entries}).http
    assert [(grant.principal, sorted(grant.scopes)) for grant in http.tokens] == [
        ("shop", ["read", "start"]),
        ("shop", ["start"]),
        ("ops", ["admin", "read"]),
    ]


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"AGENTLOOP_HTTP_TOKENS": "short"}, "at least 16 characters"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop:write"}, "unknown scope(s) write"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop:"}, "at least one scope"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop,abcdefghijklmnop"}, "one token twice"),
        ({"AGENTLOOP_HTTP_ANONYMOUS_SCOPES": "read+admin"}, "cannot grant admin"),
        ({"AGENTLOOP_HTTP_ANONYMOUS_SCOPES": "superuser"}, "unknown scope(s) superuser"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop:read:shop:more"}, "TOKEN:scopes:principal"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop:read:"}, "a principal is 1 to 64"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop:read:the shop"}, "a principal is 1 to 64"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop:read:anonymous"}, "reserved"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop:read:token-0011"}, "reserved"),
        ({"AGENTLOOP_HTTP_PORT": "70000"}, "AGENTLOOP_HTTP_PORT"),
        ({"AGENTLOOP_HTTP_MAX_BODY_BYTES": "0"}, "AGENTLOOP_HTTP_MAX_BODY_BYTES"),
        ({"AGENTLOOP_HTTP_POLL_SECONDS": "0"}, "AGENTLOOP_HTTP_POLL_SECONDS"),
    ],
)
def test_a_malformed_http_setting_names_its_variable_and_never_shows_a_token(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(environ)
    assert message in str(raised.value)
    assert "abcdefghijklmnop" not in str(raised.value)


def test_a_token_naming_no_principal_is_its_own_stable_principal_never_its_text() -> None:
    entries = "abcdefghijklmnop:read, qrstuvwxyz012345:read"
    first = Authenticator(load_settings({"AGENTLOOP_HTTP_TOKENS": entries}).http)
    reordered = Authenticator(
        load_settings({"AGENTLOOP_HTTP_TOKENS": ", ".join(reversed(entries.split(", ")))}).http
    )
    names = [first.principal(f"Bearer {token}").name for token in ("abcdefghijklmnop", "qrstuvwxyz012345")]
    again = [
        reordered.principal(f"Bearer {token}").name for token in ("abcdefghijklmnop", "qrstuvwxyz012345")
    ]

    assert names == again and len(set(names)) == 2
    assert all(name.startswith("token-") and len(name) == 22 for name in names)
    assert not any("abcdefghijklmnop" in name or "qrstuvwxyz012345" in name for name in names)

"""``HttpSettings``: tokens and scopes from the environment, closed by default, clear errors."""

from __future__ import annotations

import pytest

from agentloop.orchestration.settings import SettingsError, load_settings


def test_nothing_set_is_closed_on_the_loopback_address() -> None:
    http = load_settings({}).http
    assert (http.tokens, http.anonymous_scopes, http.cors_origins) == ((), frozenset(), ())
    assert not http.is_open
    assert (http.host, http.port, http.max_body_bytes) == ("127.0.0.1", 8000, 1_048_576)


def test_a_token_alone_holds_every_scope_and_scopes_can_be_narrowed() -> None:
    http = load_settings({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop, qrstuvwxyz012345:read+cancel"}).http
    assert [sorted(grant.scopes) for grant in http.tokens] == [
        ["cancel", "read", "start"],
        ["cancel", "read"],
    ]
    assert http.is_open
    assert "abcdefghijklmnop" not in repr(http) and "qrstuvwxyz012345" not in str(http)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"AGENTLOOP_HTTP_TOKENS": "short"}, "at least 16 characters"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop:write"}, "unknown scope(s) write"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop:"}, "at least one scope"),
        ({"AGENTLOOP_HTTP_TOKENS": "abcdefghijklmnop,abcdefghijklmnop"}, "one token twice"),
        ({"AGENTLOOP_HTTP_ANONYMOUS_SCOPES": "admin"}, "unknown scope(s) admin"),
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

"""A secret a server echoes into its error never reaches a stored error text: whatever its name or
shape, and the configured key wherever it appears, with or without an ``sk-`` prefix."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from agentloop.actions import ModelRequest
from agentloop.orchestration.llm.openai.errors import OPENAI_ERRORS
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.llm.sdk_errors import redact_secrets
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer, reply_error

failure_message = OPENAI_ERRORS.failure_message

KEY = "gw-7Hq2Lm9Xv4Rt8Nb1"  # a gateway's key: no sk- prefix
OTHER = "upstream-Zk3Pw8Yd5Qc"  # a secret that is not the configured key

ECHOES = {
    "key=": f"invalid key={OTHER} for this model",
    "api_key=": f"GET /v1?api_key={OTHER}&model=x failed",
    "api-key JSON": f'upstream said {{"api-key": "{OTHER}", "ok": false}}',
    "x-api-key header": f"request headers: x-api-key: {OTHER}\nhost: llm",
    "Authorization Bearer": f"Authorization: Bearer {OTHER}",
    "Authorization Basic": f"authorization=Basic {OTHER}",
    "bare bearer": f"token was bearer {OTHER}.",
    "token=": f"session refused (token={OTHER})",
    "password:": f"password: {OTHER}",
    "sk- key anywhere": "the key sk-proj-Abcdefgh12345678 is revoked",
}


@pytest.mark.parametrize("text", ECHOES.values(), ids=ECHOES.keys())
def test_a_secret_echoed_under_any_name_is_redacted(text: str) -> None:
    redacted = redact_secrets(text, api_key=None)
    assert OTHER not in redacted and "Abcdefgh12345678" not in redacted
    assert "[redacted]" in redacted


@pytest.mark.parametrize(
    "form", [KEY, quote(KEY, safe=""), json.dumps(KEY)[1:-1], f"key={KEY}", f"'{KEY}'"], ids=str
)
def test_the_configured_key_is_redacted_wherever_it_appears(form: str) -> None:
    text = failure_message(f"401 authentication failed: the server saw {form} and refused it", api_key=KEY)
    assert KEY not in text and KEY[4:] not in text
    assert text.startswith("openai: 401 authentication failed: the server saw ")


def test_a_short_configured_key_is_taken_out_as_a_token_never_out_of_words() -> None:
    text = failure_message("429 rate limited: Rate limit exceeded for key x (x)", api_key="x")
    assert text == "openai: 429 rate limited: Rate limit exceeded for key [redacted] ([redacted])"


def test_words_that_are_not_secrets_are_kept() -> None:
    text = "max_tokens=100 monkey=5 keyboard: ok; the key provided is wrong"
    assert redact_secrets(text, api_key=None) == text


async def test_a_server_echoing_secrets_leaves_none_in_the_failure() -> None:
    echoed = f"bad request key={KEY} api_key={OTHER} x-api-key: {OTHER} Authorization: Bearer {OTHER}"
    with OpenAICompatibleServer() as server:
        server.responder = lambda body: reply_error(400, echoed)
        processor = OpenAIProcessor(
            api_key=KEY, base_url=server.base_url, model="test-model", timeout=5.0, max_retries=0
        )
        try:
            response = await ModelRequest(instruction="Plan the search.").send(processor)
        finally:
            await processor.aclose()
    assert response.error is not None and response.error.startswith("openai: 400 bad request")
    assert KEY not in response.error and OTHER not in response.error
    assert response.error.count("[redacted]") == 4

"""Retries, timeouts and failures of the OpenAI processor: the SDK's own, each ending as a value.
What both providers meet alike is in ``test_failures_on_both_providers.py``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from openai_support import API_KEY, FAST, send, send_forced

from agentloop.actions import AiResponse, Usage
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    Reply,
    reply_delay,
    reply_error,
    reply_json,
    reply_text,
    reply_tool_call,
)


async def test_a_rate_limit_that_persists_says_so(
    openai_server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    openai_server.responder = lambda body: reply_error(429, "Slow down.", headers=FAST)

    response = await send_forced(make_processor(max_retries=3))

    assert response.error == "openai: 429 rate limited after 4 attempts: Slow down."
    assert len(openai_server.requests) == 4


async def test_a_slow_server_times_out_quickly(
    openai_server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    # the reply would come after a minute: only the client's timeout gives this error first
    openai_server.enqueue(reply_delay(60.0, then=reply_text("too late")))
    processor = make_processor(timeout=timedelta(milliseconds=200), max_retries=0)

    response = await send_forced(processor)

    assert response.error == "openai: request timed out after 1 attempt (timeout 0.2s)"
    # never a second attempt (on a loaded machine the 0.2 s can pass before the server has read the
    # first one: it then counts none)
    assert len(openai_server.requests) <= 1


async def test_a_timeout_is_retried_like_any_transient_fault(
    openai_server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    openai_server.enqueue(reply_delay(3.0), reply_tool_call("plan_search", "{}"))

    response = await send_forced(make_processor(timeout=0.2, max_retries=1))

    assert not response.has_error
    assert len(openai_server.requests) == 2


async def test_a_response_without_choices_is_an_error_that_keeps_its_usage(
    openai_server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    seen: list[Usage] = []
    openai_server.enqueue(
        reply_json(
            {
                "id": "chatcmpl-x",
                "object": "chat.completion",
                "created": 0,
                "model": "odd-model",
                "choices": [],
                "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5},
            }
        )
    )

    response = await send_forced(make_processor(on_usage=seen.append))

    assert response == AiResponse.failure(
        "openai: response has no choices", usage=Usage(input_tokens=5), model="odd-model"
    )
    assert seen == [Usage(input_tokens=5)]


async def test_an_unexpected_exception_inside_the_client_is_an_error(
    make_processor: Callable[..., OpenAIProcessor], monkeypatch: pytest.MonkeyPatch
) -> None:
    processor = make_processor()

    async def explode(**kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(processor.client.chat.completions, "create", explode)

    response = await send(processor)

    assert response.error == "openai: unexpected RuntimeError: boom"


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(reply_error(401, "Incorrect API key provided: {key}"), id="401-echoing-the-key"),
        pytest.param(reply_error(500, "upstream said Authorization: Bearer {key}", headers=FAST), id="500"),
    ],
)
async def test_the_api_key_never_appears_in_an_error(
    openai_server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor], reply: Any
) -> None:
    def echo_key(body: dict[str, Any]) -> Reply:
        message = reply.body["error"]["message"].format(key=API_KEY)
        return reply_error(reply.status, message, headers=dict(reply.headers))

    openai_server.responder = echo_key

    response = await send_forced(make_processor(max_retries=1))

    assert response.error is not None
    assert API_KEY not in response.error
    assert API_KEY[8:] not in response.error
    assert "[redacted]" in response.error


async def test_the_api_key_is_not_in_connection_or_timeout_errors(
    openai_server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    openai_server.enqueue(reply_delay(2.0))
    timed_out = await send(make_processor(timeout=0.1))
    refused_processor = make_processor()
    openai_server.stop()
    refused = await send(refused_processor)

    for response in (timed_out, refused):
        assert response.error is not None and API_KEY not in response.error


async def test_files_are_ignored_with_a_debug_line(
    openai_server: OpenAICompatibleServer,
    make_processor: Callable[..., OpenAIProcessor],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="agentloop.orchestration.llm.openai.processor"):
        response = await send(make_processor(), files=["https://example.invalid/a.pdf"])

    assert response.text == "ok"
    assert "1 file(s) ignored" in caplog.text
    assert "a.pdf" not in json.dumps(openai_server.completion_requests)

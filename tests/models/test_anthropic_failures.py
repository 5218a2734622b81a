"""Retries, timeouts and failures of the Anthropic processor: the SDK's own, each ending as a value;
malformed or wrong tool calls returned as they came, for the step to reject. What both providers
meet alike is in ``test_failures_on_both_providers.py``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from anthropic_support import ANTHROPIC_KEY, FAST, send_forced

from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
from agentloop.orchestration.testing.servers.anthropic_server import (
    AnthropicCompatibleServer,
    reply_delay,
    reply_error,
    reply_json,
    reply_tool_call,
)


async def test_an_overloaded_server_and_a_persistent_rate_limit_say_so(
    anthropic_server: AnthropicCompatibleServer, make_anthropic: Callable[..., AnthropicProcessor]
) -> None:
    anthropic_server.enqueue(
        reply_error(529, "Overloaded", headers=FAST),
        *[reply_error(429, "Slow down.", headers=FAST)] * 2,
    )
    processor = make_anthropic(max_retries=0)

    overloaded = await send_forced(processor)
    limited = await send_forced(make_anthropic(max_retries=1))

    assert overloaded.error == "anthropic: 529 overloaded after 1 attempt: Overloaded"
    assert limited.error == "anthropic: 429 rate limited after 2 attempts: Slow down."


async def test_a_slow_server_times_out_quickly_and_a_timeout_is_retried(
    anthropic_server: AnthropicCompatibleServer, make_anthropic: Callable[..., AnthropicProcessor]
) -> None:
    anthropic_server.enqueue(reply_delay(3.0), reply_delay(3.0), reply_tool_call("plan_search", "{}"))
    timed_out = await send_forced(make_anthropic(timeout=timedelta(milliseconds=200)))

    retried = await send_forced(make_anthropic(timeout=0.2, max_retries=1))

    # the error is the client's timeout, not the server's late answer (a text reply, 3 s later)
    assert timed_out.error == "anthropic: request timed out after 1 attempt (timeout 0.2s)"
    assert retried.error is None and retried.function_calls[0].name == "plan_search"
    assert len(anthropic_server.requests) == 3


async def test_a_reply_that_is_not_a_message_is_an_error(
    anthropic_server: AnthropicCompatibleServer, make_anthropic: Callable[..., AnthropicProcessor]
) -> None:
    anthropic_server.enqueue(
        reply_json(["not", "a", "message"]), reply_json({"type": "message", "content": "x"})
    )
    processor = make_anthropic()

    for _ in range(2):
        response = await send_forced(processor)
        assert response.error == "anthropic: response is not a message with content blocks"


@pytest.mark.parametrize("status", [401, 500])
async def test_the_api_key_never_appears_in_an_error_or_a_log_line(
    anthropic_server: AnthropicCompatibleServer,
    make_anthropic: Callable[..., AnthropicProcessor],
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    anthropic_server.responder = lambda body: reply_error(
        status, f"invalid x-api-key {ANTHROPIC_KEY} (Authorization: Bearer {ANTHROPIC_KEY})", headers=FAST
    )

    with caplog.at_level(logging.DEBUG):
        response = await send_forced(make_anthropic(max_retries=1))

    assert response.error is not None and "[redacted]" in response.error
    assert ANTHROPIC_KEY not in response.error and ANTHROPIC_KEY[10:] not in response.error
    assert ANTHROPIC_KEY not in caplog.text


@pytest.mark.parametrize(
    ("reply", "arguments"),
    [
        pytest.param(reply_tool_call("plan_search", "{not json"), "{not json", id="malformed-input"),
        pytest.param(
            reply_tool_call("plan_search", '["a", "list"]'), '["a", "list"]', id="input-not-an-object"
        ),
    ],
)
async def test_a_malformed_tool_input_comes_back_exactly_as_sent_for_the_step_to_reject(
    anthropic_server: AnthropicCompatibleServer,
    make_anthropic: Callable[..., AnthropicProcessor],
    reply: Any,
    arguments: str,
) -> None:
    anthropic_server.enqueue(reply)

    response = await send_forced(make_anthropic())

    assert response.error is None
    assert [(call.name, call.arguments) for call in response.function_calls] == [("plan_search", arguments)]


async def test_a_call_to_another_tool_than_the_forced_one_is_returned_as_it_came(
    anthropic_server: AnthropicCompatibleServer, make_anthropic: Callable[..., AnthropicProcessor]
) -> None:
    anthropic_server.enqueue(reply_tool_call("delete_everything", {"steps": []}))

    response = await send_forced(make_anthropic())

    assert [call.name for call in response.function_calls] == ["delete_everything"]
    assert anthropic_server.message_requests[0]["tool_choice"] == {"type": "tool", "name": "plan_search"}

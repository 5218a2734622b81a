"""Retries and failures both providers' processors meet alike, each ending as a value that says which
provider: the same test on every row of the provider table, against its own local test server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from openai_support import FAST, send, send_forced

from agentloop.orchestration.providers.table import PROVIDERS, load
from agentloop.orchestration.testing.servers import anthropic_server, openai_server
from agentloop.orchestration.testing.servers.openai_replies import (
    JsonReply,
    reply_disconnect,
    reply_text,
    reply_tool_call,
)
from agentloop.orchestration.testing.servers.scripted_server import ScriptedReplyServer


@dataclass
class Provider:
    """One provider under test: its name, running server, processor factory, and its error replies."""

    name: str
    server: ScriptedReplyServer
    make: Callable[..., Any]
    reply_error: Callable[..., JsonReply]


#: Each provider's fixtures (from the conftest) and its error shape, by name.
_FIXTURES = {
    "openai": ("openai_server", "make_processor", openai_server.reply_error),
    "anthropic": ("anthropic_server", "make_anthropic", anthropic_server.reply_error),
}


def test_every_provider_of_the_table_is_tested_here() -> None:
    assert sorted(_FIXTURES) == sorted(PROVIDERS)


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_each_row_names_its_processors_errors_and_a_server_of_its_dialect(name: str) -> None:
    row = PROVIDERS[name]
    errors = load(row.errors)

    assert load(row.processor).errors is errors and errors.provider == name
    assert issubclass(load(row.server), ScriptedReplyServer)


@pytest.fixture(params=sorted(_FIXTURES))
def provider(request: pytest.FixtureRequest) -> Provider:
    server, make, reply_error = _FIXTURES[request.param]
    return Provider(
        request.param, request.getfixturevalue(server), request.getfixturevalue(make), reply_error
    )


async def test_a_429_is_retried_and_then_succeeds(provider: Provider) -> None:
    provider.server.enqueue(
        provider.reply_error(429, "Rate limit reached.", headers=FAST),
        reply_tool_call("plan_search", {"steps": []}),
    )

    response = await send_forced(provider.make(max_retries=1))

    assert not response.has_error
    assert response.function_calls[0].arguments == '{"steps": []}'
    retry_counts = [request.headers["x-stainless-retry-count"] for request in provider.server.requests]
    assert retry_counts == ["0", "1"]


async def test_persistent_500s_end_as_an_error_after_max_retries_plus_one_attempts(
    provider: Provider,
) -> None:
    provider.server.responder = lambda body: provider.reply_error(
        500, "The server had an error.", headers=FAST
    )

    response = await send_forced(provider.make(max_retries=2))

    assert response.error == f"{provider.name}: 500 server error after 3 attempts: The server had an error."
    assert len(provider.server.requests) == 3


async def test_a_client_error_is_not_retried(provider: Provider) -> None:
    provider.server.enqueue(provider.reply_error(400, "Invalid schema for function 'plan_search'."))

    response = await send_forced(provider.make(max_retries=3))

    assert response.error == (
        f"{provider.name}: 400 bad request after 1 attempt: Invalid schema for function 'plan_search'."
    )
    assert len(provider.server.requests) == 1


async def test_a_dropped_connection_is_retried(provider: Provider) -> None:
    provider.server.enqueue(reply_disconnect(), reply_text("back"))

    response = await send(provider.make(max_retries=1))

    assert response.text == "back"
    assert len(provider.server.requests) == 2


async def test_connection_refused_is_an_error_not_an_exception(provider: Provider) -> None:
    processor = provider.make(max_retries=0)
    provider.server.stop()

    response = await send_forced(processor)

    assert response.error is not None
    assert response.error.startswith(f"{provider.name}: connection error after 1 attempt: ")


async def test_an_unmappable_history_message_is_an_error_and_nothing_is_sent(provider: Provider) -> None:
    response = await send(provider.make(), history=[{"role": "narrator", "content": "Once upon a time"}])

    assert response.error == f"{provider.name}: invalid request: history message #0: unknown role 'narrator'"
    assert provider.server.requests == []

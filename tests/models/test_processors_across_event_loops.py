"""One processor, many event loops (issue 23): a processor built once serves ``request_sync``
three times, ``asyncio.run`` twice and two threads, on both providers, against the local
protocol servers, which keep connections alive as real servers do. Before, every second run's
model call failed with ``Event loop is closed``: the SDK client kept the first loop's connections."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentloop.actions import ModelRequest
from agentloop.loops import InlineAgentRunner, ProceduralAgentLoop
from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.llm.provider import processor_from_env
from agentloop.orchestration.testing.servers.anthropic_server import AnthropicCompatibleServer
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer, reply_text

Server = OpenAICompatibleServer | AnthropicCompatibleServer


@pytest.fixture(params=["openai", "anthropic"])
def provider_server(request: pytest.FixtureRequest) -> Iterator[tuple[Server, Callable[[], Any]]]:
    """A local server and how to build a processor for it."""
    if request.param == "openai":
        with OpenAICompatibleServer(keep_alive=True) as openai_server:
            yield openai_server, lambda: OpenAIProcessor(base_url=openai_server.base_url, max_retries=0)
    else:
        with AnthropicCompatibleServer(keep_alive=True) as anthropic_server:
            url = anthropic_server.base_url
            yield anthropic_server, lambda: AnthropicProcessor(base_url=url, max_retries=0)


class Ask(ProceduralAgentLoop):
    """One raw model request; the reply's text, or why there is none."""

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        reply = await ModelRequest(instruction=f"Say {state['word']}.").send(self.context["processor"])
        return {**state, "answer": reply.error if reply.has_error else reply.text}

    def create_initial_state(self, *, input: Any) -> Any:
        return {"word": input, "answer": None}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["answer"] is not None

    def build_result(self, *, state: Any) -> Any:
        return state["answer"]


def enqueue(server: Server, *texts: str) -> None:
    for text in texts:
        server.enqueue(reply_text(text))


def test_one_processor_serves_three_request_sync_runs(
    provider_server: tuple[Server, Callable[[], Any]],
) -> None:
    server, build = provider_server
    enqueue(server, "one", "two", "three")
    runner = InlineAgentRunner.create(runnable=Ask, context={"processor": build()})

    outcomes = [runner.request_outcome_sync(input=word) for word in ("one", "two", "three")]

    assert [(outcome.status, outcome.result) for outcome in outcomes] == [
        ("succeeded", "one"),
        ("succeeded", "two"),
        ("succeeded", "three"),
    ]


def test_one_processor_serves_two_asyncio_runs(provider_server: tuple[Server, Callable[[], Any]]) -> None:
    server, build = provider_server
    enqueue(server, "first", "second")
    processor = build()

    async def ask() -> str:
        reply = await ModelRequest(instruction="Say something.").send(processor)
        return reply.error or reply.text

    assert [asyncio.run(ask()), asyncio.run(ask())] == ["first", "second"]


def test_one_processor_serves_two_threads(provider_server: tuple[Server, Callable[[], Any]]) -> None:
    server, build = provider_server
    enqueue(server, "same", "same", "same", "same")
    processor = build()
    both_asked = threading.Barrier(2, timeout=30)
    answers: list[str] = []

    async def ask() -> str:
        reply = await ModelRequest(instruction="Say same.").send(processor)
        return reply.error or reply.text

    def work() -> None:
        answers.append(asyncio.run(ask()))
        both_asked.wait()  # both loops have used the processor, and both are still open
        answers.append(asyncio.run(ask()))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert answers == ["same"] * 4


def test_the_environments_processor_serves_three_runs() -> None:
    """The issue's own script: ``processor_from_env()`` built once, three ``request_sync`` calls."""
    with OpenAICompatibleServer(keep_alive=True) as server:
        enqueue(server, "a", "b", "c")
        processor = processor_from_env({"OPENAI_BASE_URL": server.base_url, "OPENAI_MAX_RETRIES": "0"})
        runner = InlineAgentRunner.create(runnable=Ask, context={"processor": processor})

        outcomes = [runner.request_outcome_sync(input=word) for word in "abc"]

    assert [(outcome.status, outcome.result) for outcome in outcomes] == [
        ("succeeded", "a"),
        ("succeeded", "b"),
        ("succeeded", "c"),
    ]

"""Every model call counts against its run, whatever API made it (issue 33, item 3).

A forced tool step, an AI-driven turn and a raw ``ModelRequest.send``; the OpenAI and the
Anthropic processors, whole and streamed, through the real SDKs against the local servers; the
offline model; a processor that only speaks the protocol; a wrapper around another processor:
each call's usage reaches the run's meter exactly once, and a spent budget stops the run before
the next call (the model double or the server counts the requests that were made).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any, cast

import pytest

from agentloop.actions import (
    AiResponse,
    ForcedToolAction,
    InMemoryUsageMeter,
    ModelRequest,
    TokenBudgetExceededError,
    Usage,
)
from agentloop.loops import AiDrivenAgentLoop, BaseAgentLoop, InlineAgentRunner
from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
from agentloop.orchestration.llm.limits import MemoryBackend, RateLimitedProcessor, WindowRateLimiter
from agentloop.orchestration.llm.offline import OfflineModel
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.llm.stream_deltas import StreamTally, stream_reply
from agentloop.orchestration.metrics.record import use_instruments
from agentloop.orchestration.testing.servers import anthropic_server, openai_server
from agentloop.testing import ScriptedModel, text_reply, tool_call

API_KEY = "sk-test-usage-of-every-call-0123456789"
PER_CALL = Usage(input_tokens=5, output_tokens=11)


class SendThrice(BaseAgentLoop):
    """The streaming how-to's pattern: ``ModelRequest.send`` each iteration, three times."""

    max_iterations = 5

    def create_initial_state(self, *, input: Any) -> Any:
        return {"replies": []}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        request = ModelRequest(instruction=f"Say something ({iteration}).")
        reply = await request.send(self.context["processor"])
        return {"replies": [*state["replies"], reply.text]}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return len(state["replies"]) == 3

    def build_result(self, *, state: Any) -> Any:
        return state["replies"]


TOOL = {"name": "label", "description": "Label it.", "parameters": {"type": "object", "properties": {}}}


class ToolStore:
    def get_payload(self, tool_id: str) -> Any:
        return json.dumps(TOOL)


class Label(ForcedToolAction):
    name = "label"
    tool_id_key = "label_tool_id"

    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {}}

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return "Label it."

    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        return parsed


class LabelThrice(BaseAgentLoop):
    """A forced tool step each iteration, three times."""

    max_iterations = 5

    def create_initial_state(self, *, input: Any) -> Any:
        return {"labels": 0}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await Label().run(arguments={}, context=self.context)
        return {"labels": state["labels"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["labels"] == 3)

    def build_result(self, *, state: Any) -> Any:
        return state["labels"]


class Chat(AiDrivenAgentLoop):
    """An AI-driven loop with no actions: each turn the model answers in text."""


class ProtocolOnly:
    """A processor that only speaks the protocol (no ``BaseProcessor``): counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def send_request(self, **request: Any) -> AiResponse:
        self.calls += 1
        return AiResponse(text=f"reply {self.calls}", usage=PER_CALL)


async def run(runnable: type, processor: Any, *, budget: int | None, **context: Any) -> tuple[Any, Usage]:
    """Run ``runnable`` in-process with ``processor``; its result (or the budget error) and usage."""
    meter = InMemoryUsageMeter(budget=budget)
    runner = InlineAgentRunner.create(runnable=runnable, context={"processor": processor, **context})
    try:
        result: Any = await runner.request(input="x", meter=meter)
    except TokenBudgetExceededError as stopped:
        result = stopped
    return result, meter.usage


def scripted(replies: int) -> ScriptedModel:
    return ScriptedModel([text_reply(f"reply {n}", usage=PER_CALL) for n in range(replies)])


# ----- the APIs that make a call ------------------------------------------------------------------


async def test_model_request_send_counts_every_call_and_a_budget_stops_the_loop() -> None:
    model = scripted(3)
    result, usage = await run(SendThrice, model, budget=None)
    assert result == ["reply 0", "reply 1", "reply 2"]
    assert usage == Usage(input_tokens=15, output_tokens=33)  # three calls, each counted once

    model = scripted(3)
    stopped, usage = await run(SendThrice, model, budget=1)
    assert isinstance(stopped, TokenBudgetExceededError)
    assert len(model.requests) == 1  # the first call passed the budget: no second call
    assert usage == PER_CALL


async def test_model_request_send_to_a_processor_that_only_speaks_the_protocol_counts_it() -> None:
    model = ProtocolOnly()
    stopped, usage = await run(SendThrice, model, budget=1)
    assert isinstance(stopped, TokenBudgetExceededError)
    assert (model.calls, usage) == (1, PER_CALL)


async def test_a_forced_tool_step_counts_its_call_once_and_stops_at_the_budget() -> None:
    context = {"tool_store": ToolStore(), "label_tool_id": "t"}
    model = ScriptedModel([tool_call("label", {}, usage=PER_CALL) for _ in range(3)])
    result, usage = await run(LabelThrice, model, budget=None, **context)
    assert (result, usage) == (3, Usage(input_tokens=15, output_tokens=33))

    model = ScriptedModel([tool_call("label", {}, usage=PER_CALL) for _ in range(3)])
    stopped, usage = await run(LabelThrice, model, budget=1, **context)
    assert isinstance(stopped, TokenBudgetExceededError)
    assert (len(model.requests), usage) == (1, PER_CALL)


async def test_an_ai_driven_turn_counts_its_call_once() -> None:
    model = scripted(1)
    _, usage = await run(Chat, model, budget=None)
    assert len(model.requests) == 1
    assert usage == PER_CALL


async def test_a_wrapped_processor_s_call_is_counted_once() -> None:
    model = scripted(3)
    limited = RateLimitedProcessor(model, WindowRateLimiter(MemoryBackend(), requests_per_minute=100))
    _, usage = await run(SendThrice, limited, budget=None)
    assert len(model.requests) == 3
    assert usage == Usage(input_tokens=15, output_tokens=33)


async def test_the_offline_model_s_calls_count_and_a_budget_stops_them() -> None:
    model = OfflineModel()
    stopped, usage = await run(SendThrice, model, budget=1)
    assert isinstance(stopped, TokenBudgetExceededError)
    assert model.calls == 1 and usage.total_tokens > 1


class CountedCalls:
    """Stands in for the metrics' instruments: the tokens of each model call they were told of."""

    def __init__(self) -> None:
        self.tokens: list[tuple[int, int]] = []

    def model_called(self, *, input_tokens: int, output_tokens: int, **call: Any) -> None:
        self.tokens.append((input_tokens, output_tokens))


async def test_the_call_that_passes_the_budget_is_in_the_metrics_as_in_the_run_s_usage() -> None:
    instruments = CountedCalls()
    previous = use_instruments(cast(Any, instruments))
    try:
        stopped, usage = await run(SendThrice, scripted(3), budget=1)
    finally:
        use_instruments(previous)
    assert isinstance(stopped, TokenBudgetExceededError)
    assert instruments.tokens == [(PER_CALL.input_tokens, PER_CALL.output_tokens)]
    assert usage == PER_CALL


# ----- the processors, through the real SDKs -------------------------------------------------------


@pytest.fixture
def openai() -> Iterator[openai_server.OpenAICompatibleServer]:
    with openai_server.OpenAICompatibleServer(api_key=API_KEY, stream_chunk_size=4) as server:
        yield server


@pytest.fixture
def anthropic() -> Iterator[anthropic_server.AnthropicCompatibleServer]:
    with anthropic_server.AnthropicCompatibleServer(api_key=API_KEY, stream_chunk_size=4) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_openai_processor_s_calls_count_what_the_server_reported(
    openai: openai_server.OpenAICompatibleServer, stream: bool
) -> None:
    openai.enqueue(*[openai_server.reply_text(f"reply {n}", usage=(5, 11)) for n in range(3)])
    processor = OpenAIProcessor(
        api_key=API_KEY, base_url=openai.base_url, model="m", max_retries=0, stream=stream
    )
    async with processor:
        stopped, usage = await run(SendThrice, processor, budget=1)
    assert isinstance(stopped, TokenBudgetExceededError)
    assert len(openai.completion_requests) == 1
    assert usage == PER_CALL


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_anthropic_processor_s_calls_count_what_the_server_reported(
    anthropic: anthropic_server.AnthropicCompatibleServer, stream: bool
) -> None:
    anthropic.enqueue(*[anthropic_server.reply_text(f"reply {n}", usage=(5, 11)) for n in range(3)])
    processor = AnthropicProcessor(
        api_key=API_KEY, base_url=anthropic.base_url, model="claude", max_retries=0, stream=stream
    )
    async with processor:
        stopped, usage = await run(SendThrice, processor, budget=1)
    assert isinstance(stopped, TokenBudgetExceededError)
    assert len(anthropic.requests) == 1
    assert usage == PER_CALL


async def test_a_stream_cut_short_counts_what_the_server_reported_before_the_cut(
    anthropic: anthropic_server.AnthropicCompatibleServer,
) -> None:
    # the message_start event reports the input tokens (and, as Anthropic's does, 1 output token);
    # the stream ends before the reply does
    anthropic.enqueue(
        anthropic_server.reply_broken_stream(
            anthropic_server.reply_text("a reply cut short", usage=(7, 9)), after_chunks=2, fault="truncated"
        )
    )
    processor = AnthropicProcessor(
        api_key=API_KEY, base_url=anthropic.base_url, model="claude", max_retries=0, stream=True
    )
    meter = InMemoryUsageMeter()
    async with processor:
        runner = InlineAgentRunner.create(runnable=SendThrice, context={"processor": processor})
        anthropic.enqueue(*[anthropic_server.reply_text("ok", usage=(1, 1)) for _ in range(2)])
        await runner.request(input="x", meter=meter)
    assert len(anthropic.requests) == 3
    assert meter.usage == Usage(input_tokens=7 + 1 + 1, output_tokens=1 + 1 + 1)


class _Piece:
    def __init__(self, usage: Usage | None, *, breaks: bool = False) -> None:
        self.usage, self.breaks = usage, breaks


class _Stream:
    """One try of a stream: its pieces, the last of which may break it."""

    def __init__(self, pieces: list[_Piece]) -> None:
        self.pieces = pieces

    async def __aenter__(self) -> _Stream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def __aiter__(self) -> AsyncIterator[_Piece]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[_Piece]:
        for piece in self.pieces:
            if piece.breaks:
                raise ConnectionError("the connection dropped")
            yield piece


class _Reader:
    def __init__(self) -> None:
        self.usage, self.ended = Usage(), False

    async def add(self, piece: _Piece) -> None:
        if piece.usage is not None:
            self.usage, self.ended = piece.usage, True

    def response(self) -> AiResponse:
        return AiResponse(text="done", usage=self.usage)


async def test_a_stream_read_again_counts_the_usage_of_every_try() -> None:
    tries = iter(
        [
            _Stream([_Piece(Usage(input_tokens=4, output_tokens=2)), _Piece(None, breaks=True)]),
            _Stream([_Piece(Usage(input_tokens=4, output_tokens=6))]),
        ]
    )

    async def no_wait(seconds: float) -> None:
        return None

    tally = StreamTally()
    response = await stream_reply(
        lambda: _open(next(tries)),
        lambda reporter: _Reader(),
        action="m",
        interval=timedelta(0),
        retries=1,
        broken=lambda error: isinstance(error, ConnectionError),
        sleep=no_wait,
        tally=tally,
    )
    assert response.usage == tally.usage == Usage(input_tokens=8, output_tokens=8)


async def _open(stream: _Stream) -> _Stream:
    return stream

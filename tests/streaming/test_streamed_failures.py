"""A stream that fails part-way is a model failure like any other: :meth:`AiResponse.failure`
from the processor (never an exception), and a degraded run around it, whose ``delta`` events
say what had arrived before the failure."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from streaming_support import API_KEY, PLAN_TOOL, KeptEvents, send

from agentloop.actions import ForcedToolAction, Usage
from agentloop.loops import BaseAgentLoop, InlineAgentRunner
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    reply_broken_stream,
    reply_error,
    reply_text,
    reply_tool_call,
)
from agentloop.testing import ProgressRecorder

TEXT = "The first words arrive, then the line goes quiet."


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (
            "disconnect",
            "openai: stream broken: RemoteProtocolError: peer closed connection",
        ),
        ("malformed", "openai: unreadable stream chunk: JSONDecodeError"),
        ("error", "openai: APIError: the model stopped mid-stream"),
        ("truncated", "openai: the stream ended after 3 chunk(s) without a finish reason"),
    ],
)
async def test_a_stream_broken_part_way_is_a_failure_after_the_deltas_that_arrived(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor], fault: Any, reason: str
) -> None:
    server.enqueue(reply_broken_stream(reply_text(TEXT), after_chunks=3, fault=fault))
    sink = KeptEvents()

    response = await send(make_processor(stream_interval=0), sink=sink)

    assert response.has_error and response.error is not None
    assert response.error.startswith(reason), response.error
    assert (response.text, response.function_calls, response.model) == ("", (), "test-model")
    # chunk 1 holds the role, chunks 2 and 3 the first 8 characters: reported, then the failure
    assert sink.text() == TEXT[:8]


async def test_an_error_before_the_stream_starts_reads_as_it_does_unstreamed(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    server.enqueue(reply_error(429, "slow down"), reply_error(429, "slow down"))

    streamed = await send(make_processor(), sink=KeptEvents())
    whole = await send(make_processor(stream=False))

    assert streamed == whole
    assert streamed.error == "openai: 429 rate limited after 1 attempt: slow down"


async def test_the_streamed_usage_reaches_the_usage_hook(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    seen: list[Usage] = []
    server.enqueue(reply_text(TEXT, usage=(12, 5)))

    await send(make_processor(on_usage=seen.append))

    assert seen == [Usage(input_tokens=12, output_tokens=5)]


class ToolStore:
    def get_payload(self, tool_id: str) -> Any:
        return json.dumps(PLAN_TOOL) if tool_id == "plan-tool" else None


class PlanSearch(ForcedToolAction):
    name = "plan_search"
    tool_id = "plan-tool"

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return "Plan the search."

    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        return parsed.get("steps")

    def fallback(self, *, arguments: dict[str, Any], context: Any, reason: str) -> Any:
        return []


class PlanOnce(BaseAgentLoop):
    """One iteration: the forced plan, through the context's (streaming) processor."""

    max_iterations = 1

    def create_initial_state(self, *, input: Any) -> Any:
        return {"steps": None}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {"steps": await PlanSearch().run(arguments={}, context=self.context)}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["steps"] is not None

    def build_result(self, *, state: Any) -> Any:
        return state["steps"]


async def plan(processor: OpenAIProcessor, recorder: ProgressRecorder) -> Any:
    context = {"processor": processor, "tool_store": ToolStore()}
    runner = InlineAgentRunner.create(runnable=PlanOnce, context=context)
    return await runner.request_outcome(input={}, on_progress=recorder, run_id="run-stream")


async def test_a_run_whose_stream_breaks_ends_degraded_like_any_model_failure(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    server.enqueue(reply_broken_stream(reply_tool_call("plan_search", {"steps": ["a", "b"]}), after_chunks=4))
    recorder = ProgressRecorder()

    outcome = await plan(make_processor(stream_interval=0), recorder)

    assert (outcome.status, outcome.result) == ("degraded", [])
    (failure,) = outcome.failures
    assert failure.action == "plan_search" and "stream broken" in failure.reason
    assert API_KEY not in failure.reason
    phases = [event.phase for event in recorder.events]
    assert phases.index("delta") < phases.index("model_unavailable") < phases.index("degraded")
    *deltas, discard = [dict(event.data) for event in recorder.events if event.phase == "delta"]
    assert "".join(data["arguments"] for data in deltas) == '{"steps": ["a", "b"]}'[:8]
    assert discard == {"seq": len(deltas) + 1, "discard": True}  # the abandoned reply's text is dropped


async def test_a_run_whose_stream_completes_succeeds_with_its_deltas_in_the_progress(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    server.enqueue(reply_tool_call("plan_search", {"steps": ["a", "b"]}, call_id="call_plan"))
    recorder = ProgressRecorder()

    outcome = await plan(make_processor(stream_interval=0), recorder)

    assert (outcome.status, outcome.result) == ("succeeded", ["a", "b"])
    deltas = [event for event in recorder.events if event.phase == "delta"]
    assert {(event.run_id, event.runnable, event.path, str(event.status)) for event in deltas} == {
        ("run-stream", "test-model", "", "progress")
    }
    assert [event.data["seq"] for event in deltas] == list(range(1, len(deltas) + 1))
    assert "".join(event.data["arguments"] for event in deltas) == '{"steps": ["a", "b"]}'
    assert {event.data["call_id"] for event in deltas} == {"call_plan"}

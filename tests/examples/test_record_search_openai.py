"""The record-search agent with the real OpenAIProcessor (official SDK) against the local
OpenAI-protocol server: three forced tool calls over HTTP, real records from the sample database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentloop.examples.record_search import MODEL_UNAVAILABLE_MESSAGE, NO_PLAN_MESSAGE, RecordSearchGenerator
from agentloop.examples.record_search.offline import extract_embedded_text, offline_responders
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    Reply,
    reply_error,
    reply_text,
    reply_tool_call,
)

API_KEY = "sk-test-record-search-0123456789"
PLAN = {
    "steps": [
        {"category_id": "companies", "filters": [{"field": "industry", "op": "eq", "value": "Energy"}]},
        {"follow": "deals", "filters": [{"field": "stage", "op": "eq", "value": "won"}]},
    ],
    "limit": 3,
}


@pytest.fixture
def server() -> Any:
    with OpenAICompatibleServer(api_key=API_KEY) as running:
        yield running


@pytest.fixture
async def openai_generator(
    server: OpenAICompatibleServer, record_db_url: str
) -> AsyncIterator[RecordSearchGenerator]:
    processor = OpenAIProcessor(
        api_key=API_KEY, base_url=server.base_url, model="test-model", timeout=5.0, max_retries=0
    )
    async with (
        processor,
        RecordSearchGenerator.create_with_defaults(database_url=record_db_url, processor=processor) as made,
    ):
        yield made


def forced_names(server: OpenAICompatibleServer) -> list[str]:
    return [body["tool_choice"]["function"]["name"] for body in server.completion_requests]


async def test_the_chat_flow_makes_three_forced_calls_over_http(
    server: OpenAICompatibleServer, openai_generator: RecordSearchGenerator
) -> None:
    server.enqueue(
        reply_tool_call("classify_search_intent", {"is_search": True, "reason": "asks for deals"}),
        reply_tool_call("plan_record_search", PLAN),
        reply_tool_call("compose_answer", {"message": "Here are the won deals with energy companies."}),
    )
    result = await openai_generator.generate(message="won deals with energy companies, top 3")
    assert result is not None
    assert result["message"] == "Here are the won deals with energy companies."
    assert result["answered_by"] == "test-model"
    assert result["found_count"] > 0 and len(result["records"]) == min(3, result["found_count"])
    assert all(r["category"] == "deals" and r["fields"]["stage"] == "won" for r in result["records"])

    assert forced_names(server) == ["classify_search_intent", "plan_record_search", "compose_answer"]
    for body in server.completion_requests:
        assert [tool["function"]["name"] for tool in body["tools"]] == [
            body["tool_choice"]["function"]["name"]
        ]
        system = body["messages"][0]
        assert system["role"] == "system"
        assert (
            extract_embedded_text(system["content"], "user_request")
            == "won deals with energy companies, top 3"
        )
    plan_tool = server.completion_requests[1]["tools"][0]["function"]
    assert plan_tool["parameters"]["required"] == ["steps"]  # the schema came from the AiTool table
    assert '"energy"' in server.completion_requests[1]["messages"][0]["content"].lower()  # the catalog
    summary = extract_embedded_text(server.completion_requests[2]["messages"][0]["content"], "result_summary")
    assert summary is not None and f'"found_count": {result["found_count"]}' in summary


async def test_ordinary_conversation_stops_at_the_gate(
    server: OpenAICompatibleServer, openai_generator: RecordSearchGenerator
) -> None:
    server.enqueue(reply_tool_call("classify_search_intent", {"is_search": False, "reason": "greeting"}))
    assert await openai_generator.generate(message="good morning!") is None
    assert forced_names(server) == ["classify_search_intent"]


@pytest.mark.parametrize(
    ("plan_reply", "answer"),
    [
        (reply_error(500, "upstream exploded"), MODEL_UNAVAILABLE_MESSAGE),
        (reply_text("I think you want companies"), MODEL_UNAVAILABLE_MESSAGE),
        (
            reply_tool_call("plan_record_search", '{"steps": [{"category_id": "users"'),
            MODEL_UNAVAILABLE_MESSAGE,
        ),
        (
            reply_tool_call(
                "plan_record_search", {"steps": [{"category_id": "companies"}, {"follow": "owner"}]}
            ),
            NO_PLAN_MESSAGE,
        ),
    ],
    ids=["http 500", "text", "truncated json", "bogus relation"],
)
async def test_a_failed_plan_call_over_http_says_the_model_was_unavailable_and_a_bad_plan_asks_to_rephrase(
    plan_reply: Reply,
    answer: str,
    server: OpenAICompatibleServer,
    openai_generator: RecordSearchGenerator,
    request: pytest.FixtureRequest,
) -> None:
    request_id = request.node.callspec.id
    wrong = any(tag in request_id for tag in ("text", "truncated json"))  # a wrong answer is asked again
    server.enqueue(*[plan_reply] * (2 if wrong else 1))
    result = await openai_generator.generate_for_explicit_search(message="find stuff")
    assert result["message"] == answer and result["records"] == []
    assert forced_names(server) == ["plan_record_search"] * (2 if wrong else 1)


async def test_a_compose_failure_over_http_gives_the_deterministic_sentence(
    server: OpenAICompatibleServer, openai_generator: RecordSearchGenerator
) -> None:
    server.enqueue(reply_tool_call("plan_record_search", PLAN), reply_error(429, "slow down"))
    result = await openai_generator.generate_for_explicit_search(message="won energy deals")
    assert result["message"].startswith(f"Found {result['found_count']} deal")


async def test_the_offline_responders_drive_the_wire_protocol_too(
    server: OpenAICompatibleServer, openai_generator: RecordSearchGenerator
) -> None:
    """A server that answers like the offline model: the whole path is real HTTP and real SQL."""
    responders = offline_responders()

    def respond(body: dict[str, Any]) -> Reply:
        name = body["tool_choice"]["function"]["name"]
        tool: Callable[..., Any] = responders[name]
        return reply_tool_call(name, tool(body["tools"][0]["function"], body["messages"][0]["content"], []))

    server.responder = respond
    result = await openai_generator.generate(message="Which companies are in the Netherlands?")
    assert result is not None and result["found_count"] > 0
    assert all(record["fields"]["country"] == "Netherlands" for record in result["records"])
    assert result["message"].startswith("[offline model] Found")
    assert len(server.completion_requests) == 3

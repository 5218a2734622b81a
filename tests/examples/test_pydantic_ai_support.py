"""The pydantic-ai support-desk example (``agentloop/examples/pydantic_ai_support``): registered by
name, it answers with a typed resolution through the official ``openai`` SDK against the local
OpenAI-protocol server; its refund waits for a person's approval, and a declined one never runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentloop import InlineAgentRunner
from agentloop.examples.pydantic_ai_support import SupportAgent
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.testing.servers.openai_replies import Reply, reply_tool_call
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer

API_KEY = "sk-test-support-0123456789"


def support_model(body: dict[str, Any]) -> Reply:
    """Looks A-100 up, asks for its refund, then resolves with what the refund tool said."""
    results = [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]
    if not results:
        return reply_tool_call("order_status", {"order_id": "A-100"})
    if len(results) == 1:
        return reply_tool_call("refund", {"order_id": "A-100", "amount": 40})
    refunded = results[1].startswith("refunded")
    resolution = {
        "order_id": "A-100",
        "action": "refunded" if refunded else "refund_declined",
        "reply": results[1] if refunded else "We could not refund this order.",
    }
    return reply_tool_call("final_result", resolution)


@pytest.fixture
def support_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(api_key=API_KEY, responder=support_model) as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
        yield running


def test_the_example_is_registered_by_name() -> None:
    registry = RunnableRegistry.from_modules(["agentloop.examples.pydantic_ai_support"])
    assert registry.get("examples.pydantic_ai_support").runnable is SupportAgent


@pytest.mark.parametrize(("approved", "action"), [(True, "refunded"), (False, "refund_declined")])
def test_a_refund_waits_for_approval(
    support_server: OpenAICompatibleServer, approved: bool, action: str
) -> None:
    asked: list[str] = []

    def person(question: Any) -> bool:
        asked.append(question.prompt)
        return approved

    result = InlineAgentRunner.create(runnable=SupportAgent).request_sync(
        input="Where is order A-100? Please refund it.", on_question=person
    )

    assert result["order_id"] == "A-100" and result["action"] == action
    assert asked == ['Allow the agent to call refund({"order_id": "A-100", "amount": 40})?']
    assert len(support_server.completion_requests) == 3

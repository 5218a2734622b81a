"""``TypedAction``: an AI-driven loop's tool declared by a pydantic model; the arguments arrive validated."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field, field_validator

from agentloop import AgentActionRegistry, AiDrivenAgentLoop, InlineAgentRunner, TypedAction
from agentloop.testing import ScriptedModel, text_reply, tool_call


class Query(BaseModel):
    """Search the records."""

    query: str = Field(min_length=1, description="What to look for.")
    limit: int = Field(default=3, ge=1, le=10)

    @field_validator("query")
    @classmethod
    def no_wildcards(cls, value: str) -> str:
        if "*" in value:
            raise ValueError("wildcards are not supported")
        return value.strip()


class Search(TypedAction[Query]):
    name = "search"
    description = "Search the records."
    seen: list[Query] = []

    def perform(self, arguments: Query, *, context: Any) -> Any:
        self.seen.append(arguments)
        return [f"{arguments.query} #{index}" for index in range(arguments.limit)]


class Researcher(AiDrivenAgentLoop):
    registry = AgentActionRegistry.create(actions=[Search()])


def test_the_tool_offered_to_the_model_is_generated_from_the_model() -> None:
    (tool, _finish) = Researcher.create().offered_tools()

    assert tool == {
        "name": "search",
        "description": "Search the records.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "What to look for."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
            },
            "required": ["query"],
        },
    }


async def test_refused_arguments_are_a_tool_error_and_accepted_ones_arrive_as_an_instance() -> None:
    Search.seen = []
    model = ScriptedModel(
        [
            tool_call("search", {"query": "cats*"}, id="c1"),
            tool_call("search", {"query": "", "limit": 50}, id="c2"),
            tool_call("search", {"query": " cats ", "limit": 2}, id="c3"),
            text_reply("two cats"),
        ]
    )

    result = await InlineAgentRunner.create(runnable=Researcher, context={"processor": model}).request(
        input="Find cats"
    )

    assert result["answer"] == "two cats"
    assert Search.seen == [Query(query="cats", limit=2)]
    tool_results = [
        json.loads(message["content"])
        for message in model.requests[-1].history_messages
        if message["role"] == "tool"
    ]
    assert tool_results[0] == {
        "ok": False,
        "error": "invalid arguments: query: Value error, wildcards are not supported",
    }
    assert tool_results[1] == {
        "ok": False,
        "error": "invalid arguments: query: String should have at least 1 character; "
        "limit: Input should be less than or equal to 10",
    }
    assert tool_results[2] == {"ok": True, "result": ["cats #0", "cats #1"]}


async def test_run_validates_the_arguments_when_called_directly() -> None:
    assert await Search().run(arguments={"query": "dogs", "limit": 1}, context=None) == ["dogs #0"]
    assert Search().argument_problem({"limit": 2}) == "invalid arguments: query: Field required"

"""A composite to record and replay: two branches of a typed step, one of an AI-driven loop.

Imported by the test process and, through the worker's registry, by the worker. ``PROMPT`` is
the summary step's prompt: a test changes it to see the replay report the divergence.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from agentloop import (
    AgentActionRegistry,
    AiDrivenAgentLoop,
    BaseActionStage,
    BaseCompositeAgent,
    Branch,
    BranchResult,
    TypedAction,
    TypedToolAction,
    embed_user_text,
    register,
    standard_context,
)

#: The summary step's prompt (a test changes it).
PROMPT = "Summarise the topic in one line."


class Summary(BaseModel):
    """One line about a topic."""

    line: str = Field(description="The summary, one line.")


class Summarize(TypedToolAction[Summary]):
    name = "summarize"
    description = "Summarise a topic in one line."

    def build_instruction(self, *, arguments: Any, context: Any) -> str:
        return PROMPT + "\n" + embed_user_text("topic", arguments["topic"])


class SummarizeStage(BaseActionStage):
    action = Summarize


class Query(BaseModel):
    term: str


class Lookup(TypedAction[Query]):
    """A tool the researcher may call: the length of a term (code, no model)."""

    name = "lookup"
    description = "Look a term up."

    async def perform(self, arguments: Query, *, context: Any) -> Any:
        return {"term": arguments.term, "letters": len(arguments.term)}


class Researcher(AiDrivenAgentLoop):
    max_iterations = 4

    @property
    def registry(self) -> AgentActionRegistry:
        return AgentActionRegistry.create(actions=[Lookup()])


@register("replay.digest", context_factory=standard_context)
class Digest(BaseCompositeAgent):
    """Summaries of ``input["topics"]`` and a researcher's answer to ``input["question"]``."""

    branch_runnables = (SummarizeStage, Researcher)

    def build_branches(self, *, input: Any) -> list[Branch]:
        branches = [
            Branch(runnable=SummarizeStage, input={"topic": topic}, key=f"topic-{index}")
            for index, topic in enumerate(input["topics"])
        ]
        return [*branches, Branch(runnable=Researcher, input=input["question"], key="research")]

    def merge_results(self, *, results: list[BranchResult], input: Any) -> Any:
        return {result.key: result.output for result in results}


def answer(body: dict[str, Any]) -> Any:
    """The local model servers' answer to any request of :class:`Digest` (either protocol)."""
    from agentloop.testing import reply_tool_call

    choice = body.get("tool_choice")
    choice = choice if isinstance(choice, dict) else {}
    forced = (choice.get("function") or {}).get("name") or (
        choice.get("name") if choice.get("type") == "tool" else None
    )
    if forced == "summarize":
        return reply_tool_call("summarize", {"line": "a line about it"})
    text = json.dumps(body.get("messages", []))
    if '"tool_result"' in text or '"role": "tool"' in text:  # it looked the term up: finish
        return reply_tool_call("finish", {"answer": "seven letters"})
    return reply_tool_call("lookup", {"term": "replays"})

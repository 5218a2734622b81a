"""A pipeline to record and fork: an outline step, a researcher loop of three turns, a polish step.

Imported by the test process and, through ``AGENTLOOP_IMPORTS``, by the CLI in it. Its model is
the local OpenAI-protocol server at ``FORK_MODEL_URL``. ``OUTLINE`` and ``POLISH`` are the two
typed steps' prompts: a test changes one to fork a run whose code changed.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pydantic import BaseModel, Field

from agentloop import (
    AgentActionRegistry,
    AiDrivenAgentLoop,
    BaseActionStage,
    BaseAgentPipeline,
    OpenAIProcessor,
    StandardContext,
    TypedAction,
    TypedToolAction,
    embed_user_text,
    register,
)

#: The prompts of the first and the last step (a test changes them).
OUTLINE = "Outline the question in one line."
POLISH = "Polish the answer in one line."


class Line(BaseModel):
    """One line of text."""

    line: str = Field(description="The line.")


class Outline(TypedToolAction[Line]):
    name = "outline"
    description = "Outline a question in one line."

    def build_instruction(self, *, arguments: Any, context: Any) -> str:
        return OUTLINE + "\n" + embed_user_text("question", arguments["text"])


class Polish(TypedToolAction[Line]):
    name = "polish"
    description = "Polish an answer in one line."

    def build_instruction(self, *, arguments: Any, context: Any) -> str:
        return POLISH + "\n" + embed_user_text("answer", arguments["text"])


class OutlineStage(BaseActionStage):
    action = Outline


class PolishStage(BaseActionStage):
    action = Polish


class Term(BaseModel):
    term: str


class Lookup(TypedAction[Term]):
    """The researcher's tool: a term's length (code, no model)."""

    name = "lookup"
    description = "Look a term up."

    async def perform(self, arguments: Term, *, context: Any) -> Any:
        return {"term": arguments.term, "letters": len(arguments.term)}


class Researcher(AiDrivenAgentLoop):
    max_iterations = 5

    @property
    def registry(self) -> AgentActionRegistry:
        return AgentActionRegistry.create(actions=[Lookup()])


def context(spec: Any) -> StandardContext:
    """The steps' model: the local server the test started."""
    processor = OpenAIProcessor(
        base_url=os.environ["FORK_MODEL_URL"], api_key="test", model="m", max_retries=0
    )
    return StandardContext(processor=processor)


@register("fork.plan", context_factory=context)
class Plan(BaseAgentPipeline):
    """Outline the question, research it (three model turns), polish the answer."""

    stages = (OutlineStage, Researcher, PolishStage)

    def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
        if index == 0:
            return {"text": input}
        if index == 1:
            return previous_output["line"]
        return {"text": previous_output["answer"]}


def answer(body: dict[str, Any]) -> Any:
    """The local server's answer to any request of :class:`Plan`: the researcher looks two terms
    up, then finishes; the polish step says which prompt it was given."""
    from agentloop.testing import reply_tool_call

    choice = body.get("tool_choice")
    forced = ((choice if isinstance(choice, dict) else {}).get("function") or {}).get("name")
    text = json.dumps(body.get("messages", []))
    if forced == "outline":
        return reply_tool_call("outline", {"line": "how long is the word"})
    if forced == "polish":
        line = "polished" if "Polish the answer" in text else "re-polished"
        return reply_tool_call("polish", {"line": line})
    looked_up = text.count('\\"letters\\"')
    if looked_up < 2:
        return reply_tool_call("lookup", {"term": ["replays", "forks"][looked_up]})
    return reply_tool_call("finish", {"answer": "seven letters"})

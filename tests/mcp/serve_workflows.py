"""The runnables ``agentloop mcp serve`` serves in its tests (``AGENTLOOP_IMPORTS``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agentloop.actions.human import Question, QuestionKind, ask_human
from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.registry import register


class Number(BaseModel):
    n: int = Field(ge=0, le=1000, description="What to double.")


class Doubles(BaseAgentLoop):
    """Doubles a number, one iteration per step of three."""

    input_type = Number
    max_iterations = 5

    def create_initial_state(self, *, input: Any) -> Any:
        return {"n": Number.model_validate(input).n, "steps": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "steps": state["steps"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["steps"] >= 3)

    def build_result(self, *, state: Any) -> Any:
        return {"doubled": state["n"] * 2}


class AsksFirst(BaseAgentLoop):
    """Asks a person before it goes on."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"approved": None}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        approved = await ask_human(Question(prompt="ship it?", kind=QuestionKind.APPROVAL))
        return {"approved": approved}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["approved"] is not None

    def build_result(self, *, state: Any) -> Any:
        return state


register("serve.doubles", Doubles)
register("serve.asks_first", AsksFirst)

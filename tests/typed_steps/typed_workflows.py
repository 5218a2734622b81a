"""Workflows of the typed-steps tests: a typed forced-tool step, function steps, a bounded loop.

Importing this module declares them (``AGENTLOOP_IMPORTS=typed_workflows``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agentloop import (
    AgentActionRegistry,
    BaseActionStage,
    BaseAgentLoop,
    BaseAgentPipeline,
    InMemoryToolStore,
    OfflineModel,
    ProceduralAgentLoop,
    TypedToolAction,
    embed_user_text,
    register,
    step,
    sync_tools,
)


class Label(BaseModel):
    """How a support ticket is labelled."""

    label: Literal["bug", "feature"] = Field(description="What the ticket asks for.")
    confidence: float = Field(ge=0, le=1)


class LabelTicket(TypedToolAction[Label]):
    """A typed forced-tool step: the output is a :class:`Label`."""

    name = "label_ticket"
    description = "Label a support ticket."

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return "Label the ticket.\n" + embed_user_text("ticket", str(arguments.get("text", "")))


class LabelStage(BaseActionStage):
    action = LabelTicket


@step
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@step
async def exclaim(text: str, context: Any) -> str:
    return text + str(context.get("mark", "!"))


@register("typed.shout")
class Shout(BaseAgentPipeline):
    stages = (shout, exclaim)


@register("typed.count_to")
class CountTo(BaseAgentLoop):
    """Counts to its input, under a bound of 10."""

    max_iterations = 10

    def create_initial_state(self, *, input: Any) -> Any:
        return {"n": 0, "goal": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["goal"])

    def build_result(self, *, state: Any) -> Any:
        return {"n": state["n"], "finished": self.stopped_by == "complete"}


class Triage(ProceduralAgentLoop):
    """A loop whose registry holds the typed step (found by ``agentloop tools sync``)."""

    @property
    def registry(self) -> AgentActionRegistry:
        return AgentActionRegistry([LabelTicket()])

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        label = await self.perform_action(name="label_ticket", arguments={"text": "it crashes"})
        return {"result": label.model_dump() if label is not None else {"label": "unknown"}}


def offline_context(spec: Any) -> dict[str, Any]:
    """The offline model and a tool store holding the typed step's generated schema."""
    store = InMemoryToolStore()
    sync_tools(store, [LabelTicket])
    return {"processor": OfflineModel(), "tool_store": store, "mark": spec.get("mark", "!")}


register("typed.triage", Triage, context_factory=offline_context)
register("typed.label", LabelStage, context_factory=offline_context)
register("typed.shout_marked", Shout, context_factory=offline_context)

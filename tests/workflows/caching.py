"""Cached steps for the step-caching tests, inline and on workers.

``caching.label`` is one cached typed tool call (:class:`LabelTicket`, 60 s) as a stage;
``caching.short`` the same with a 1 s ttl. On a worker their context is the standard
one: the processor from ``OPENAI_BASE_URL`` (the tests' local server) and the
``AiTool`` table on ``DATABASE_URL``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from agentloop.actions import TypedToolAction, embed_user_text
from agentloop.orchestration.registry import register
from agentloop.orchestration.runtime.context import standard_context
from agentloop.pipelines import BaseActionStage


class Label(BaseModel):
    """A support ticket's label."""

    label: str
    confidence: float


class LabelTicket(TypedToolAction[Label]):
    name = "label_ticket"
    description = "Label a support ticket."
    cache_ttl = 60.0

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return "Label the ticket.\n" + embed_user_text("ticket", str(arguments.get("text", "")))


class LabelTicketBriefly(LabelTicket):
    cache_ttl = 1.0


class LabelStage(BaseActionStage):
    action: ClassVar[type[LabelTicket]] = LabelTicket


class BriefLabelStage(BaseActionStage):
    action: ClassVar[type[LabelTicket]] = LabelTicketBriefly


register("caching.label", LabelStage, context_factory=standard_context)
register("caching.short", BriefLabelStage, context_factory=standard_context)

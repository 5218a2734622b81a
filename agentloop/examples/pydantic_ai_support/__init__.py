"""A support-desk agent written with pydantic-ai, run durably by agentloop (the ``pydantic-ai`` extra).

``support`` is a plain pydantic-ai ``Agent``: it looks an order up, refunds it when the customer
asks (a tool that needs a person's approval) and answers with a typed ``Resolution``, validated by
pydantic-ai. Nothing in it knows of agentloop; :data:`SupportAgent` is the runnable that wraps it,
registered as ``examples.pydantic_ai_support``, so a worker started with
``AGENTLOOP_IMPORTS=agentloop.examples.pydantic_ai_support`` runs it by name, every model request
and tool call a durable step, the refund's approval a question the run pauses on::

    agentloop trigger examples.pydantic_ai_support --input '"Where is order A-100? Refund it."'
    agentloop resume RUN_ID --answer true

Its model is ``openai-chat:gpt-4o-mini`` through pydantic-ai's OpenAI model on the official SDK,
which reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` (any OpenAI-compatible server) when a run
first asks it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel
from pydantic_ai import Agent

from agentloop import pydantic_ai_runnable, register

__all__ = ["ORDERS", "Resolution", "SupportAgent", "order_status", "refund", "support"]

#: The shop's orders (a real deployment reads its database here).
ORDERS: dict[str, dict[str, str | int]] = {
    "A-100": {"status": "delayed", "amount": 40, "carrier": "DHL"},
    "A-101": {"status": "delivered", "amount": 25, "carrier": "UPS"},
}


class Resolution(BaseModel):
    """What the agent answers: the order, what was done, and a reply for the customer."""

    order_id: str
    action: Literal["informed", "refunded", "refund_declined"]
    reply: str


support = Agent(
    "openai-chat:gpt-4o-mini",
    defer_model_check=True,
    name="support",
    output_type=Resolution,
    instructions=(
        "You answer a shop's customers. Look the order up with order_status; refund it with refund "
        "only when the customer asks. Answer with the resolution."
    ),
)


@support.tool_plain
def order_status(order_id: str) -> dict[str, str | int]:
    """The order's status, amount and carrier; ``{"error": ...}`` for an unknown order."""
    return ORDERS.get(order_id, {"error": f"no order {order_id}"})


@support.tool_plain(requires_approval=True)
def refund(order_id: str, amount: int) -> str:
    """Refund ``amount`` of the order (a person approves each refund first)."""
    if order_id not in ORDERS:
        return f"no order {order_id}"
    return f"refunded {amount} for {order_id}"


#: The runnable that runs :data:`support` durably.
SupportAgent = pydantic_ai_runnable(support)

register("examples.pydantic_ai_support", SupportAgent)

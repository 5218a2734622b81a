"""pydantic-ai agents registered as runnables, for the tests of ``integrations/pydantic_ai`` in this
process and on real workers (``AGENTLOOP_IMPORTS=workflows.pydantic_agents``).

The agents are plain pydantic-ai agents on ``openai-chat:test-model``: the official ``openai`` SDK under
pydantic-ai's ``OpenAIChatModel``, pointed by ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` at the local
OpenAI-protocol test server. Their tools append their name to the file named by ``PAI_TOOL_LOG``
(one line per call that ran), so a test counts them; ``sum_lines`` hangs on its first call while
``PAI_HANG_FIRST_SUM`` names a marker file that does not exist yet (it creates it), so a test kills
the worker in the middle of the run. :func:`answer` is the model server's side: the reply each
request gets, from the tool results the request already holds.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent

from agentloop import BaseAgentPipeline, pydantic_ai_runnable, register, step
from agentloop.orchestration.testing.servers.openai_replies import Reply, reply_text, reply_tool_call


class Invoice(BaseModel):
    customer: str
    total: int


def tally(name: str) -> None:
    log = os.environ.get("PAI_TOOL_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(f"{name} {os.getpid()}\n")


invoicer = Agent(
    "openai-chat:test-model",
    defer_model_check=True,
    name="invoicer",
    output_type=Invoice,
    instructions="Look the customer up, sum the invoice lines, answer with the invoice.",
)


@invoicer.tool_plain
def lookup_customer(customer_id: str) -> dict[str, str]:
    """The customer's record."""
    tally("lookup_customer")
    return {"id": customer_id, "name": "ACME GmbH"}


@invoicer.tool_plain
def sum_lines(lines: list[int]) -> int:
    """The sum of the invoice lines."""
    marker = os.environ.get("PAI_HANG_FIRST_SUM")
    if marker and not Path(marker).exists():
        Path(f"{marker}.tmp").write_text(str(os.getpid()))
        os.replace(f"{marker}.tmp", marker)  # whole, or not there: the test reads it at once
        time.sleep(120)  # the test kills this worker now
    tally("sum_lines")
    return sum(lines)


refunder = Agent(
    "openai-chat:test-model",
    defer_model_check=True,
    name="refunder",
    instructions="Refund the customer when asked.",
)


@refunder.tool_plain(requires_approval=True)
def refund(amount: int) -> str:
    """Refund ``amount`` to the customer."""
    tally("refund")
    return f"refunded {amount}"


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results a request carries, oldest first."""
    return [str(message.get("content")) for message in body["messages"] if message.get("role") == "tool"]


def answer(body: dict[str, Any]) -> Reply:
    """The test model: the next step of whichever agent sent ``body``."""
    tools = {tool["function"]["name"] for tool in body.get("tools", [])}
    done = tool_results(body)
    if "lookup_customer" in tools:
        if not done:
            return reply_tool_call("lookup_customer", {"customer_id": "c-7"})
        if len(done) == 1:
            return reply_tool_call("sum_lines", {"lines": [120, 30, 50]})
        customer = json.loads(done[0])["name"]
        return reply_tool_call("final_result", {"customer": customer, "total": int(done[1])})
    if "refund" in tools:
        if not done:
            return reply_tool_call("refund", {"amount": 40})
        return reply_text(f"done: {done[-1]}")
    return reply_text("no agent of this module sent that")


InvoiceAgent = pydantic_ai_runnable(invoicer)
RefundAgent = pydantic_ai_runnable(refunder)


@step
def invoice_line(invoice: dict[str, Any]) -> str:
    """A plain stage after the agent: the invoice as one line."""
    return f"{invoice['customer']}: {invoice['total']}"


class InvoiceThenLine(BaseAgentPipeline):
    stages = [InvoiceAgent, invoice_line]


register("pai.invoicer", InvoiceAgent)
register("pai.refunder", RefundAgent)
register("pai.invoice_line", InvoiceThenLine)

"""Workflows for the metrics tests, imported by the test process and, through
``AGENTLOOP_IMPORTS``, by the worker: a cached step that calls the offline model, and a step
that fails."""

from __future__ import annotations

from agentloop.orchestration.llm.offline import OfflineModel
from agentloop.orchestration.registry import register
from agentloop.pipelines import step


@step(name="metrics_ask", cache_ttl=600)
async def ask(text: str) -> str:
    """One call of the offline model; its tokens go on the run's meter (every call's do), so a hit
    saves them."""
    reply = await OfflineModel().send_request(
        instruction=f"say something about {text}",
        tools=[],
        tool_choices=None,
        history_messages=[],
        documents=[],
        files=[],
        is_auto_handle_function_call=False,
    )
    return reply.text


@step(name="metrics_fail")
def fail(text: str) -> str:
    raise ValueError(f"no answer for {text}")


register("metrics.ask", ask)
register("metrics.fail", fail)

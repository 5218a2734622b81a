"""The GenAI semantic-convention attributes of a model call's span (model and tokens; the prompt
only when opted in, the reply's text never)."""

from __future__ import annotations

from typing import Any

from agentloop.actions.model import AiResponse
from agentloop.actions.tracing import Span, current_tracer


def request_attributes(model: str, instruction: str) -> dict[str, Any]:
    """The attributes known before the call; the instruction only when the tracer opted in
    (``AGENTLOOP_TRACING_CAPTURE_PROMPTS``)."""
    captured = instruction if getattr(current_tracer(), "capture_prompts", False) else None
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": model or None, "gen_ai.prompt": captured}


def record_response(span: Span, response: AiResponse) -> None:
    """The reply's model, token usage and failure on ``span``."""
    if response.model:
        span.set_attribute("gen_ai.response.model", response.model)
    span.set_attribute("gen_ai.usage.input_tokens", response.usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", response.usage.output_tokens)
    if response.error:
        span.set_attribute("error.type", "model_failure")

"""A model call's span: GenAI attributes always, the prompt only when opted in."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentloop.actions.tracing import use_tracer
from agentloop.orchestration.llm.offline import OfflineModel
from agentloop.orchestration.tracing.otel import OtelTracer


@pytest.mark.parametrize("capture", [False, True])
def test_the_prompt_is_on_the_span_only_when_opted_in(capture: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = OtelTracer(provider.get_tracer("test"), capture_prompts=capture)

    async def call() -> None:
        with use_tracer(tracer):
            await OfflineModel().send_request(
                instruction="secret instruction",
                tools=[],
                tool_choices=None,
                history_messages=[],
                documents=[],
                files=[],
                is_auto_handle_function_call=False,
            )

    asyncio.run(call())
    [span] = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "chat offline" and attributes["gen_ai.request.model"] == "offline"
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert ("gen_ai.prompt" in attributes) is capture
    assert (attributes.get("gen_ai.prompt") == "secret instruction") is capture

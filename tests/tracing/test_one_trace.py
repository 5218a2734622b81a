"""One trace per run: a composite of three branches on a worker gives one connected trace, with a
span per task, per loop iteration and per model call (GenAI attributes, no prompt text)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from workflows.tracing import SECRET_PROMPT

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.embedded import embedded_worker
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.settings.tracing import TracingSettings
from agentloop.orchestration.store import open_store
from agentloop.orchestration.tracing.otel import install_tracing
from tests.services.redis_server import ServiceUnavailable, private_redis_server


@pytest.fixture
def traced_run(tmp_path: Any) -> Iterator[tuple[Any, list[ReadableSpan]]]:
    try:
        server_context = private_redis_server()
        server = server_context.__enter__()
    except ServiceUnavailable as unavailable:
        pytest.skip(unavailable.reason)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store, _ = open_store(f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    app = create_app(
        settings=load_settings({"AGENTLOOP_PACK_SIZE": "1"}),  # a task per branch: the spans of each
        registry=RunnableRegistry.from_modules(["workflows.tracing"]),
        store=store,
        overrides={"broker_url": server.url, "result_backend": server.url},
    )
    install_tracing(app, TracingSettings(), provider=provider)
    try:
        with embedded_worker(app, pool="solo"):
            runner = CeleryAgentRunner.create(runnable="tracing.three_branches", app=app, store=store)
            handle = runner.request_sync(input=None)
            result = handle.wait_sync(timeout=30)
        yield result, list(exporter.get_finished_spans())
    finally:
        handle = runner = None
        gc.collect()  # results let go while their Redis runs
        pubsub = getattr(getattr(app.backend, "result_consumer", None), "_pubsub", None)
        if pubsub is not None:
            pubsub.close()
            app.backend.result_consumer._pubsub = None
        CeleryInstrumentor().uninstrument()  # Celery's signals are process-wide
        app.close()
        store.engine.dispose()
        server_context.__exit__(None, None, None)


def test_a_composite_of_three_branches_is_one_connected_trace(traced_run: Any) -> None:
    result, spans = traced_run
    assert result == ["a", "b", "c"]
    # the worker's start-up ping is a trace of its own; everything of the run is one
    spans = [span for span in spans if "agentloop.ping" not in str(_root_of(span, spans).name)]
    assert len({span.context.trace_id for span in spans}) == 1
    by_id = {span.context.span_id: span for span in spans}
    roots = [span for span in spans if span.parent is None]
    assert len(roots) == 1
    for span in spans:  # every span reaches the root through its parents
        while span.parent is not None:
            span = by_id[span.parent.span_id]
        assert span is roots[0]
    names = [span.name for span in spans]
    for task in ("agentloop.launch", "agentloop.merge", "agentloop.finalize"):
        assert any(task in name for name in names), names
    assert sum("run/agentloop.run" in name for name in names) == 3
    iterations = [span for span in spans if span.name == "agentloop.iteration"]
    assert (
        sorted(span.attributes["agentloop.path"] for span in iterations)
        == ["branch/a"] * 2 + ["branch/b"] * 2 + ["branch/c"] * 2
    )
    models = [span for span in spans if span.name == "chat offline"]
    assert len(models) == 6
    for span in models:
        assert by_id[span.parent.span_id].name == "agentloop.iteration"
        assert span.attributes["gen_ai.request.model"] == "offline"
        assert span.attributes["gen_ai.usage.input_tokens"] > 0
        assert "gen_ai.usage.output_tokens" in span.attributes
    assert not any(SECRET_PROMPT in str(dict(span.attributes or {})) for span in spans)


def _root_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan:
    by_id = {other.context.span_id: other for other in spans}
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
    return span

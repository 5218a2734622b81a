"""The tracer seam on OpenTelemetry, and Celery instrumented so one run is one trace.

:func:`install_tracing` instruments Celery with ``opentelemetry-instrumentation-celery``: a
span per task (``run/agentloop.stage`` ...) and per publish, the trace context carried in
every task message's headers, so the tasks a launch's canvas sends, on any worker, nest under
the launch's span (a client that traces its own send puts the launch under its span). Inside
a task the core's spans (loop iterations, model calls; ``actions/tracing.py``) nest under the
task's span through :class:`OtelTracer`, each carrying the run's id and the node's path
(``agentloop.run_id``, ``agentloop.path``). The console exporter writes to stderr, so a
command's stdout stays its own (``trigger --json`` prints only JSON). Nothing happens unless
an exporter is configured (``AGENTLOOP_TRACING_EXPORTER``) or a tracer provider is given
(tests: the SDK's in-memory exporter).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from agentloop.actions.tracing import Span
from agentloop.loops.scope import current_scope
from agentloop.orchestration.settings.tracing import TracingSettings

logger = logging.getLogger(__name__)

#: The instrumentation scope of the framework's own spans.
TRACER_NAME = "agentloop"


class OtelTracer:
    """:class:`~agentloop.actions.tracing.Tracer` on an OpenTelemetry tracer: each span is current while open,
    so model-call spans nest under their iteration's, and the iteration's under the task's."""

    def __init__(self, tracer: trace.Tracer, *, capture_prompts: bool = False) -> None:
        self.tracer, self.capture_prompts = tracer, capture_prompts

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Span]:
        values, scope = dict(attributes), current_scope()
        if scope is not None:  # where in which run: every span of a run says so
            values.setdefault("agentloop.run_id", scope.run_id)
            values.setdefault("agentloop.path", scope.path)
        with self.tracer.start_as_current_span(name, attributes=values) as span:
            yield span


def exporter_for(settings: TracingSettings) -> SpanExporter:
    """The span exporter ``settings`` name (the console's writes to stderr: stdout is the program's)."""
    if settings.exporter == "console":
        return ConsoleSpanExporter(out=sys.stderr)
    import importlib  # opentelemetry-exporter-otlp, installed by whoever picks otlp

    module = importlib.import_module("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    exporter: SpanExporter = module.OTLPSpanExporter()
    return exporter


def install_tracing(
    app: Any, settings: TracingSettings, *, provider: TracerProvider | None = None
) -> OtelTracer | None:
    """Instrument Celery and return the tracer ``app``'s tasks give the core (``None``: off).

    ``provider`` (default: one exporting to ``settings``' exporter in batches) receives every span.
    Celery's instrumentation is process-wide: the first provider installed in a process is its.
    """
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    if provider is None:
        if not settings.enabled:
            return None
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter_for(settings)))
    instrumentor = CeleryInstrumentor()  # type: ignore[no-untyped-call]
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument(tracer_provider=provider)
    tracer = OtelTracer(provider.get_tracer(TRACER_NAME), capture_prompts=settings.capture_prompts)
    app.agentloop_tracer = tracer
    return tracer

"""One trace per run: the core's tracer seam on OpenTelemetry, and Celery's tasks instrumented."""

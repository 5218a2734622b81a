"""Run-level metrics on OpenTelemetry, scraped by Prometheus.

``record.py`` is what the rest of the orchestration calls where a run starts or ends, a step
ends, a model answers or the step cache is asked: it does nothing until a process installs the
instruments (:func:`~agentloop.orchestration.metrics.exporter.install_metrics`, with the
``metrics`` extra). ``instruments.py`` holds the instruments, their names, labels and buckets;
``exporter.py`` a meter provider whose Prometheus reader fills a registry of its own, served by
``agentloop serve``'s ``/metrics`` route and, with ``AGENTLOOP_METRICS_PORT``, by a worker
(``celery_adapter/worker_metrics.py``); ``fleet.py`` the gauges read at scrape time (queue depth, runs
waiting on a person). Labels are bounded: runnable names, statuses, providers, models, queues;
never a run id or a user's text.
"""

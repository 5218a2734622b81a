"""A meter provider whose Prometheus reader fills a registry of its own, and the process's one.

:class:`PrometheusMetrics` is OpenTelemetry's SDK with ``opentelemetry-exporter-prometheus``'s
reader: instruments are OpenTelemetry's (an application may add an OTLP reader beside), the
reader turns them into Prometheus families on each scrape, and ``prometheus_client`` writes the
text format. Each instance has its own ``CollectorRegistry``, so two never mix (no global
registry, no global meter provider). :func:`install_metrics` makes one this process's: the one
``record.py`` counts with. Imported only by whoever turns metrics on (the ``metrics`` extra).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest, start_http_server

from agentloop.orchestration.metrics.instruments import RunInstruments
from agentloop.orchestration.metrics.record import process_recorder

__all__ = ["CONTENT_TYPE", "METER_NAME", "PrometheusMetrics", "install_metrics", "process_metrics"]

#: The instrumentation scope of the framework's metrics (its tracer's is the same name).
METER_NAME = "agentloop"
#: The media type of a scrape (Prometheus' text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class PrometheusMetrics:
    """A meter provider read by Prometheus through its own registry; ``process``: add the
    process's CPU, memory and open files (``process_*``)."""

    def __init__(self, *, process: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        if process:
            ProcessCollector(registry=self.registry)
        self.reader = PrometheusMetricReader(
            disable_target_info=True, scope_info_enabled=False, registry=self.registry
        )
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.meter: Meter = self.provider.get_meter(METER_NAME)
        self._server: Any = None

    def scrape(self) -> bytes:
        """Everything the registry holds now, in Prometheus' text format."""
        return bytes(generate_latest(self.registry))

    def serve(self, host: str, port: int) -> None:
        """Serve :meth:`scrape` at ``http://host:port/metrics`` from a daemon thread."""
        self._server, _ = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        """Stop serving and shut the provider down (its reader leaves the registry)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self.provider.shutdown()

    def forget_server(self) -> None:
        """Close the listening socket inherited over a fork, without the thread that served it
        (which a forked child does not have)."""
        server, self._server = self._server, None
        if server is not None:
            server.socket.close()


def process_metrics() -> PrometheusMetrics | None:
    """This process's metrics, once :func:`install_metrics` made them."""
    exporter = process_recorder().exporter
    return exporter if isinstance(exporter, PrometheusMetrics) else None


def install_metrics(*, fresh: bool = False) -> PrometheusMetrics:
    """This process's metrics, made (with the run instruments ``record.py`` counts with) on the
    first call. ``fresh``: make new ones whatever was there (a prefork pool process, whose copy of
    its parent's counts is not its own)."""
    recorder = process_recorder()
    with recorder.lock:
        metrics = process_metrics()
        if metrics is None or fresh or recorder.instruments is None:
            if metrics is not None:
                metrics.forget_server()
            metrics = PrometheusMetrics(process=True)
            recorder.exporter, recorder.instruments = metrics, RunInstruments(metrics.meter)
        return metrics

"""Real runs on a real prefork worker (private Redis, a SQLite store shared with the test), then
scrapes: the worker's ports (its main process and each pool process) count the runs, steps,
model calls and cache lookups; ``agentloop serve``'s ``/metrics`` (closed by default) shows the
runs waiting on a person and the broker's queue depth; and every metric the Grafana dashboard
queries is in these scrapes."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.settings.http import HttpSettings, parse_tokens
from agentloop.orchestration.store import RunRecord, RunStore
from agentloop.orchestration.web import create_web_app
from agentloop.orchestration.wire import LAUNCH, PING
from tests.metrics.scrape import Key, fetch, free_ports, names, samples, summed, value
from tests.services.worker_environment import WorkerEnvironment

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MODULES = ("workflows.metrics", "workflows.human")
DASHBOARD = ROOT / "deploy" / "grafana" / "agentloop.json"
#: Tokens of the web app: one with ``metrics`` only (Prometheus'), one with ``read`` only.
SCRAPER, READER = "prometheus-scrapes-0001", "reader-reads-only-00002"
#: The label names a series may carry: bounded values only (never a run id or a user's text).
BOUNDED_LABELS = {
    "runnable", "status", "result", "queue", "source", "le", "error_type", "gen_ai_operation_name",
    "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_token_type",
}  # fmt: skip
#: The worker's ports: its main process's, and one per pool process of ``-c 2`` and the spare a
#: prefork worker keeps beside packs (``celery_adapter/pack_gate.py``).
PORTS = 4
#: How long the test waits for the worker to do what it was asked (a bound, not a verdict).
PATIENCE = 60.0


@dataclass(frozen=True, kw_only=True)
class Observed:
    """What the runs left: the worker's scrapes (summed over its processes), each process's own,
    the web app's answers, and the runs."""

    worker: dict[Key, float]
    per_process: list[dict[Key, float]]
    serve: dict[Key, float]
    parked: dict[Key, float]
    statuses: dict[str, int]
    runs: dict[str, RunRecord]


def _wait_for(store: RunStore, run_id: str, done: Any) -> RunRecord:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        record = store.get_run(run_id)
        if record is not None and done(record):
            return record
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not get there: {store.get_run(run_id)}")


def _launch(app: Any, store: RunStore, runnable: str, input: Any, *, until: Any = None) -> RunRecord:
    run_id = f"metrics-{uuid.uuid4().hex[:12]}"
    app.send_task(LAUNCH, kwargs={"runnable": runnable, "input": input, "run_id": run_id})
    return _wait_for(store, run_id, until or (lambda record: record.is_finished))


def _scrape_worker(
    base: int, processes: int, expected: Any
) -> tuple[dict[Key, float], list[dict[Key, float]]]:
    """The scrapes of the worker's ports, once they hold what ``expected`` asks (counts recorded
    just after the store's commit may be a moment behind it)."""
    deadline = time.monotonic() + PATIENCE
    while True:
        each = [samples(fetch(f"http://127.0.0.1:{port}/metrics")) for port in range(base, base + processes)]
        total = summed(each)
        if expected(total) or time.monotonic() > deadline:
            return total, each
        time.sleep(0.1)


def _web(app: Any, store: RunStore) -> Any:
    tokens = parse_tokens(f"{SCRAPER}:metrics:prometheus,{READER}:read:reader")
    return create_web_app(celery_app=app, settings=Settings(http=HttpSettings(tokens=tokens)), store=store)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    with ExitStack() as stack:
        base = free_ports(PORTS)
        services = WorkerEnvironment.start(
            stack, tmp_path_factory.mktemp("metrics"), env={"AGENTLOOP_METRICS_PORT": str(base)}
        )
        services.start_worker(MODULES, concurrency=2)
        registry = RunnableRegistry.from_modules(MODULES)
        app, store = services.client(registry=registry), services.store

        runs = {
            "first": _launch(app, store, "metrics.ask", "tea"),
            "again": _launch(app, store, "metrics.ask", "tea"),  # a cache hit: no model call
            "fails": _launch(app, store, "metrics.fail", "tea"),
            "waits": _launch(app, store, "human.approve", "x", until=lambda r: r.status == "waiting"),
        }

        def complete(total: dict[Key, float]) -> bool:
            return (
                value(total, "agentloop_runs_finished_total") >= 3
                and value(total, "agentloop_step_duration_seconds_count", status="paused") >= 1
            )

        worker, per_process = _scrape_worker(base, PORTS, complete)

        with TestClient(_web(app, store)) as client:
            statuses = {
                "none": client.get("/metrics").status_code,
                "read": client.get("/metrics", headers={"Authorization": f"Bearer {READER}"}).status_code,
            }
            answer = client.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER}"})
            statuses["metrics"] = answer.status_code
            assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
            serve = samples(answer.text)

        parked_app = services.client(registry=registry, queue="metrics-parked")
        for _ in range(3):  # no worker takes this queue: the messages wait there
            parked_app.send_task(PING)
        with TestClient(_web(parked_app, store)) as client:
            parked = samples(client.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER}"}).text)
        yield Observed(
            worker=worker, per_process=per_process, serve=serve, parked=parked, statuses=statuses, runs=runs
        )


def test_the_workers_ports_count_runs_by_runnable_and_status(observed: Observed) -> None:
    found = observed.worker
    assert observed.runs["first"].status == "succeeded" and observed.runs["fails"].status == "failed"
    assert value(found, "agentloop_runs_started_total", runnable="metrics.ask") == 2
    assert value(found, "agentloop_runs_started_total", runnable="metrics.fail") == 1
    assert value(found, "agentloop_runs_started_total", runnable="human.approve") == 1
    assert value(found, "agentloop_runs_finished_total", runnable="metrics.ask", status="succeeded") == 2
    assert value(found, "agentloop_runs_finished_total", runnable="metrics.fail", status="failed") == 1
    assert value(found, "agentloop_runs_finished_total", runnable="human.approve") == 0  # still waiting
    assert value(found, "agentloop_run_duration_seconds_count", runnable="metrics.ask") == 2
    assert value(found, "agentloop_run_duration_seconds_bucket", runnable="metrics.fail", le="+Inf") == 1


def test_steps_are_timed_by_how_they_ended(observed: Observed) -> None:
    found = observed.worker
    assert (
        value(found, "agentloop_step_duration_seconds_count", runnable="metrics.ask", status="completed") == 2
    )
    assert (
        value(found, "agentloop_step_duration_seconds_count", runnable="metrics.fail", status="failed") == 1
    )
    assert (
        value(found, "agentloop_step_duration_seconds_count", runnable="human.approve", status="paused") == 1
    )


def test_model_calls_and_their_tokens_are_counted_by_provider_and_model(observed: Observed) -> None:
    found, first = observed.worker, observed.runs["first"]
    labels = {"gen_ai_provider_name": "offline", "gen_ai_request_model": "offline"}
    assert (
        value(found, "gen_ai_client_operation_duration_seconds_count", **labels) == 1
    )  # the hit called none
    assert value(found, "gen_ai_client_operation_duration_seconds_count", error_type="model_failure") == 0
    tokens = "gen_ai_client_token_usage_sum"
    assert value(found, tokens, gen_ai_token_type="input", **labels) == first.input_tokens > 0
    assert value(found, tokens, gen_ai_token_type="output", **labels) == first.output_tokens > 0


def test_cache_hits_misses_and_tokens_saved_are_counted(observed: Observed) -> None:
    found, first, again = observed.worker, observed.runs["first"], observed.runs["again"]
    assert value(found, "agentloop_cache_lookups_total", result="miss") == 1
    assert value(found, "agentloop_cache_lookups_total", result="hit") == 1
    assert again.tokens_saved == first.total_tokens > 0
    assert value(found, "agentloop_cache_tokens_saved_total") == again.tokens_saved


def test_each_pool_process_serves_its_own_counts(observed: Observed) -> None:
    """Four ports (the main process, two pool processes and the spare kept beside packs): the runs
    were ended in the pool processes, whichever took them, each count once, and the sum is the
    whole worker's."""
    finished = [value(scrape, "agentloop_runs_finished_total") for scrape in observed.per_process]
    assert len(finished) == PORTS and sum(finished) == 3
    assert all(scrape for scrape in observed.per_process)  # every port answered


def test_labels_are_bounded(observed: Observed) -> None:
    run_ids = {record.id for record in observed.runs.values()}
    for name, labels in [*observed.worker, *observed.serve]:
        if name.startswith(("agentloop_", "gen_ai_")):
            assert {label for label, _ in labels} <= BOUNDED_LABELS, name
            assert not {text for _, text in labels} & run_ids, name
            assert not any("tea" in text for _, text in labels), name  # a run's input is user text


def test_serve_metrics_is_closed_by_default(observed: Observed) -> None:
    assert observed.statuses == {"none": 401, "read": 403, "metrics": 200}


def test_serve_shows_the_runs_waiting_on_a_person_and_the_queue_depth(observed: Observed) -> None:
    serve, parked = observed.serve, observed.parked
    assert value(serve, "agentloop_runs_in_flight", runnable="human.approve", status="waiting") == 1
    assert (
        value(serve, "agentloop_runs_in_flight", runnable="metrics.ask") == 0
    )  # ended runs are not in flight
    assert value(serve, "agentloop_queue_depth", queue="agentloop") == 0  # the worker took every message
    assert value(parked, "agentloop_queue_depth", queue="metrics-parked") == 3
    for scrape in (serve, parked):
        assert value(scrape, "agentloop_metrics_source_up", source="broker") == 1
        assert value(scrape, "agentloop_metrics_source_up", source="store") == 1


def dashboard_metrics() -> set[str]:
    """The metric names the dashboard's queries read."""
    exprs = [
        target["expr"]
        for panel in json.loads(DASHBOARD.read_text())["panels"]
        for target in panel.get("targets", [])
    ]
    assert exprs, "the dashboard has no queries"
    words = {word for expr in exprs for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr)}
    return {word for word in words if word.startswith(("agentloop_", "gen_ai_client_"))}


def test_every_metric_the_dashboard_queries_exists_in_a_real_scrape(observed: Observed) -> None:
    queried = dashboard_metrics()
    scraped = names(observed.worker) | names(observed.serve)
    assert len(queried) >= 10
    assert sorted(queried - scraped) == []

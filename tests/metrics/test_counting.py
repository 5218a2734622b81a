"""What is counted, once: a run's first start and its end in either run store, a model call
through a wrapping processor, the deployment's gauges when a source does not answer, and what
``/metrics`` answers without the ``metrics`` extra. In-process, on a meter provider of the test's."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentloop.actions.model import ModelRequest
from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.errors import RateLimitTimeoutError, RunAlreadyEndedError, SettingsError
from agentloop.orchestration.llm.limits.processor import RateLimitedProcessor
from agentloop.orchestration.llm.limits.window import Permit
from agentloop.orchestration.llm.offline import OfflineModel
from agentloop.orchestration.metrics.exporter import PrometheusMetrics
from agentloop.orchestration.metrics.fleet import MAX_KEYS, OTHER_KEYS, FleetGauges, bounded_keys
from agentloop.orchestration.metrics.instruments import MAX_RUNNABLES, OTHER, REFUSED, RunInstruments
from agentloop.orchestration.metrics.record import use_instruments
from agentloop.orchestration.settings import Settings, load_settings
from agentloop.orchestration.settings.http import HttpSettings, parse_tokens
from agentloop.orchestration.store import InMemoryRunStore, RunStore
from agentloop.orchestration.web import create_web_app
from tests.metrics.scrape import samples, value

TOKEN = "prometheus-scrapes-0001"


@pytest.fixture
def counted() -> Iterator[PrometheusMetrics]:
    """This process counts with the test's instruments for the test."""
    metrics = PrometheusMetrics()
    previous = use_instruments(RunInstruments(metrics.meter))
    try:
        yield metrics
    finally:
        use_instruments(previous)
        metrics.close()


def test_a_run_is_started_and_finished_once_whatever_tries_again(
    counted: PrometheusMetrics, each_run_store: RunStore
) -> None:
    each_run_store.create_run(run_id="r1", runnable="shop.answer", input={})
    assert each_run_store.mark_running("r1")
    assert each_run_store.mark_running("r1")  # a redelivered launch, a resumed wait: not a second start
    each_run_store.finish_run("r1", status="failed", error={"type": "ValueError", "message": "no"})
    each_run_store.finish_run(
        "r1", status="failed", error={"type": "ValueError", "message": "no"}
    )  # the same end
    with pytest.raises(RunAlreadyEndedError):
        each_run_store.finish_run("r1", status="succeeded", output=1)
    assert not each_run_store.mark_running("r1")

    found = samples(counted.scrape().decode())
    assert value(found, "agentloop_runs_started_total", runnable="shop.answer") == 1
    assert value(found, "agentloop_runs_finished_total", runnable="shop.answer", status="failed") == 1
    assert value(found, "agentloop_runs_finished_total", runnable="shop.answer") == 1  # no other status
    assert value(found, "agentloop_run_duration_seconds_count", runnable="shop.answer", status="failed") == 1


def test_open_runs_are_counted_by_runnable_and_status(each_run_store: RunStore) -> None:
    for run_id, runnable in (("a", "x"), ("b", "x"), ("c", "y"), ("d", "y")):
        each_run_store.create_run(run_id=run_id, runnable=runnable, input=None)
    each_run_store.mark_running("b")
    each_run_store.mark_running("d")
    each_run_store.finish_run("d", status="succeeded")
    assert each_run_store.count_open_runs() == {("x", "pending"): 1, ("x", "running"): 1, ("y", "pending"): 1}


def _request() -> ModelRequest:
    return ModelRequest(instruction="hello")


class _Spent:
    async def acquire(self, *, max_wait: Any = None) -> Permit:
        raise RateLimitTimeoutError("spent", waited=0.0, max_wait=0.0, reason="requests")

    async def record(self, tokens: int) -> None:
        return None

    def describe(self) -> str:
        return "spent"


class _Open(_Spent):
    async def acquire(self, *, max_wait: Any = None) -> Permit:
        return Permit(window=0, requests=1, tokens=0)


async def test_a_model_call_through_a_wrapper_is_counted_once_as_its_providers(
    counted: PrometheusMetrics,
) -> None:
    """The rate limiter wraps the model: the call is the model's, counted once (by the processor
    that made it), and a call the limiter refused is a failed call of the same model."""
    answered = await _request().forward(RateLimitedProcessor(OfflineModel(), _Open()))
    refused = await _request().forward(RateLimitedProcessor(OfflineModel(), _Spent()))
    assert not answered.has_error and refused.has_error

    found = samples(counted.scrape().decode())
    labels = {"gen_ai_provider_name": "offline", "gen_ai_request_model": "offline"}
    assert value(found, "gen_ai_client_operation_duration_seconds_count", **labels) == 2
    failed = {**labels, "error_type": "model_failure"}
    assert value(found, "gen_ai_client_operation_duration_seconds_count", **failed) == 1
    assert (
        value(found, "gen_ai_client_token_usage_sum", gen_ai_token_type="input")
        == answered.usage.input_tokens
    )


def test_a_source_that_does_not_answer_gives_no_series_and_says_so() -> None:
    metrics = PrometheusMetrics()

    def broker_away() -> dict[str, int]:
        raise ConnectionRefusedError("the broker is away")

    FleetGauges(metrics.meter, queue_depths=broker_away, run_counts=lambda: {("x", "waiting"): 2})
    try:
        found = samples(metrics.scrape().decode())
    finally:
        metrics.close()
    assert not [name for name, _ in found if name == "agentloop_queue_depth"]  # absent, never 0
    assert value(found, "agentloop_metrics_source_up", source="broker") == 0
    assert value(found, "agentloop_metrics_source_up", source="store") == 1
    assert value(found, "agentloop_runs_in_flight", runnable="x", status="waiting") == 2


def test_serve_on_an_unreachable_broker_still_answers_with_the_store_gauges() -> None:
    app = create_app(
        store=InMemoryRunStore(),
        overrides={"broker_url": "redis://127.0.0.1:9/0", "result_backend": "cache+memory://"},
    )
    try:
        tokens = parse_tokens(f"{TOKEN}:metrics")
        web = create_web_app(celery_app=app, settings=Settings(http=HttpSettings(tokens=tokens)))
        with TestClient(web) as client:
            answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    finally:
        app.close()
    assert answer.status_code == 200
    found = samples(answer.text)
    assert value(found, "agentloop_metrics_source_up", source="broker") == 0
    assert value(found, "agentloop_metrics_source_up", source="store") == 1


def test_without_the_metrics_extra_the_route_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agentloop.orchestration.metrics.exporter", None)  # not installed
    app = create_app(store=InMemoryRunStore(), overrides={"broker_url": "memory://"})
    try:
        tokens = parse_tokens(f"{TOKEN}:metrics")
        web = create_web_app(celery_app=app, settings=Settings(http=HttpSettings(tokens=tokens)))
        with TestClient(web) as client:
            answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    finally:
        app.close()
    assert answer.status_code == 501
    assert "pip install 'agentloop[metrics]'" in answer.json()["error"]["message"]


@pytest.mark.parametrize("port", ["nine", "-1", "70000"])
def test_a_malformed_metrics_port_is_a_clear_error(port: str) -> None:
    with pytest.raises(SettingsError, match="AGENTLOOP_METRICS_PORT"):
        load_settings({"AGENTLOOP_METRICS_PORT": port})


def test_the_metrics_port_is_off_by_default() -> None:
    assert not load_settings({}).metrics.enabled
    assert load_settings({"AGENTLOOP_METRICS_PORT": "9464"}).metrics.port == 9464


def test_a_refused_launch_or_a_flood_of_names_makes_no_new_series(counted: PrometheusMetrics) -> None:
    """A name a poison message carried, or the hidden stand-in of a refused one, is ``(refused)``;
    past :data:`MAX_RUNNABLES` names a process counts the rest as ``(other)``."""
    store = InMemoryRunStore()
    names = ["<hidden str 12 chars>", "(unreadable)", *(f"made.up.{n}" for n in range(MAX_RUNNABLES + 10))]
    for position, name in enumerate(names):
        store.create_run(run_id=f"r{position}", runnable=name, input=None)
        store.finish_run(f"r{position}", status="failed", error={"type": "InvalidTaskError", "message": ""})

    found = samples(counted.scrape().decode())
    finished = {
        dict(labels)["runnable"]: count
        for (name, labels), count in found.items()
        if name == "agentloop_runs_finished_total"
    }
    assert finished[REFUSED] == 2 and finished[OTHER] == 10
    made_up = {name: count for name, count in finished.items() if name.startswith("made.up.")}
    assert len(made_up) == MAX_RUNNABLES and set(made_up.values()) == {1}


def test_the_keys_gauges_name_the_busiest_keys_and_sum_the_others() -> None:
    metrics = PrometheusMetrics()
    keys = {
        f"tenant-{n:03d}": {"in_flight": n % 7, "waiting": 1, "branches_waiting": 2}
        for n in range(MAX_KEYS + 10)
    }
    FleetGauges(metrics.meter, queue_depths=dict, run_counts=dict, key_counts=lambda: keys)
    try:
        found = samples(metrics.scrape().decode())
    finally:
        metrics.close()
    named = {dict(labels)["key"] for name, labels in found if name == "agentloop_key_runs"}
    assert len(named) == MAX_KEYS + 1 and OTHER_KEYS in named  # bounded, whatever the keys
    kept = bounded_keys(keys)
    total = sum(states["waiting"] for states in kept.values())
    assert total == MAX_KEYS + 10  # nothing dropped: the others are summed
    assert value(found, "agentloop_key_runs", key=OTHER_KEYS, state="waiting") == 10
    branches = {dict(labels)["key"] for name, labels in found if name == "agentloop_key_branches"}
    assert branches == named  # the same bounded keys
    assert value(found, "agentloop_key_branches", key=OTHER_KEYS, state="waiting") == 20
    runs_states = {dict(labels)["state"] for name, labels in found if name == "agentloop_key_runs"}
    assert runs_states == {"in_flight", "waiting"}  # a key's branches are not its runs


def test_metrics_show_each_keys_runs_and_branches_in_flight_and_waiting() -> None:
    """``/metrics`` reads the keys' slots: a pack's row counts as its branches."""
    store = InMemoryRunStore()
    store.create_run(run_id="r1", runnable="r", input=None)
    slots = store.concurrency
    assert slots.acquire(run_id="r1", key="A", limit=1).admitted
    for holder, weight in (("r1\x1fb0", 1), ("r1\x1fp0", 2), ("r1\x1fb1", 1)):
        slots.acquire(run_id=holder, key="A", kind="branch", limit=3, weight=weight)
    app = create_app(
        store=store, overrides={"broker_url": "redis://127.0.0.1:9/0", "result_backend": "cache+memory://"}
    )
    try:
        tokens = parse_tokens(f"{TOKEN}:metrics")
        web = create_web_app(celery_app=app, settings=Settings(http=HttpSettings(tokens=tokens)))
        with TestClient(web) as client:
            found = samples(client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text)
    finally:
        app.close()
    assert value(found, "agentloop_key_runs", key="A", state="in_flight") == 1
    assert value(found, "agentloop_key_branches", key="A", state="in_flight") == 3  # b0, and p0's two
    assert value(found, "agentloop_key_branches", key="A", state="waiting") == 1  # b1

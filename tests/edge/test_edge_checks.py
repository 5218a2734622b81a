"""The edge's checks on one message, without a worker: what passes, what is refused and why, and
what a refusal records. ``check_message`` never raises and never recurses."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from celery.exceptions import InvalidTaskError
from hypothesis import given, settings
from hypothesis import strategies as st
from kombu.exceptions import ContentDisallowed

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.edge import (
    MAX_BODY_BYTES,
    MAX_DEPTH,
    Rejection,
    check_message,
    nests_deeper_than,
    rejection_of,
)
from agentloop.orchestration.celery_adapter.edge_consumer import EdgeConsumer, recorder_of
from agentloop.orchestration.celery_adapter.wire_versions import WireGate
from agentloop.orchestration.store import InMemoryRunStore


class FakeMessage:
    """What the edge reads of a kombu message: headers, the raw body's size, its type, the payload."""

    def __init__(
        self, headers: Any, body: Any = None, *, raw: bytes | None = None, error: Exception | None = None
    ):
        self.headers = headers
        self.body = raw if raw is not None else b"[[], {}, {}]"  # only its size is read
        self.content_type = "application/json"
        self._payload, self._error = body, error

    @property
    def payload(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._payload


def headers(**changes: Any) -> dict[str, Any]:
    return {
        "task": "agentloop.launch",
        "id": "t-1",
        "root_id": "t-1",
        "retries": 0,
        "timelimit": [None, None],
    } | changes


def nested(depth: int) -> Any:
    """``depth`` lists, one inside the other."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


GOOD = [[], {"runnable": "parity.count", "input": 1}, {"callbacks": None, "chain": None}]


def test_a_well_formed_message_passes() -> None:
    assert check_message(FakeMessage(headers(), GOOD)) is None
    assert check_message(FakeMessage(headers(), [[], {}, None])) is None


def test_a_message_of_a_plausible_wire_version_passes_the_edge_without_or_with_the_header() -> None:
    """Without the header a message is version 1; a newer one up to ``MAX_VERSIONS_AHEAD`` above the
    worker's is not malformed (``wire_versions.py`` parks it); further ahead it is refused."""
    for extra in ({}, {"agentloop_wire": 1}, {"agentloop_wire": 5, "agentloop_wire_deferrals": 3}):
        assert check_message(FakeMessage(headers(**extra), GOOD)) is None
    assert check_message(FakeMessage(headers(agentloop_wire=7), GOOD), 3) is None
    assert check_message(FakeMessage(headers(agentloop_wire=7), GOOD)) is not None


def test_depth_is_measured_without_recursion_at_any_depth() -> None:
    assert nests_deeper_than(nested(1_000_000), MAX_DEPTH)
    assert not nests_deeper_than(nested(MAX_DEPTH), MAX_DEPTH)
    assert nests_deeper_than(nested(MAX_DEPTH + 1), MAX_DEPTH)
    assert not nests_deeper_than("a string is a leaf", 0)


def test_kwargs_are_refused_one_level_past_the_limit() -> None:
    # the kwargs object is level 1, the input list level 2 ...
    within = [[], {"input": nested(MAX_DEPTH - 1)}, {}]
    beyond = [[], {"input": nested(MAX_DEPTH)}, {}]

    assert check_message(FakeMessage(headers(), within)) is None
    refused = check_message(FakeMessage(headers(), beyond))
    assert (
        refused is not None
        and refused.reason == f"its args or kwargs are nested deeper than {MAX_DEPTH} levels"
    )


REFUSED = {
    "an object body": ({"a": 1}, "not a task protocol 2 body"),
    "kwargs that are a list": ([[], [1, 2], {}], "not a task protocol 2 body"),
    "kwargs with a number key": ([[], {1: 2}, {}], "not a task protocol 2 body"),
    "an embed that is a string": ([[], {}, "chain"], "not a task protocol 2 body"),
    "args nested too deep": ([nested(MAX_DEPTH + 1), {}, {}], "nested deeper than"),
    "a chain nested too deep": (
        [[], {}, {"chain": nested(1000)}],
        "callbacks, chain or chord are nested deeper",
    ),
}


@pytest.mark.parametrize(("body", "reason"), REFUSED.values(), ids=REFUSED.keys())
def test_bodies_that_are_not_the_protocol_triple_are_refused(body: Any, reason: str) -> None:
    refused = check_message(FakeMessage(headers(), body))
    assert refused is not None and reason in refused.reason
    assert refused.task == "agentloop.launch" and refused.task_id == "t-1" and refused.run_id == "t-1"


BAD_HEADERS = {
    "no headers": (None, "no headers object"),
    "no task id": (headers(id=None), "task id header"),
    "a task id of 300 characters": (headers(id="x" * 300), "task id header"),
    "a task name that is a list": (headers(task=["agentloop.launch"]), "task name header"),
    "a root id that is a number": (headers(root_id=5), "'root_id' header"),
    "a time limit that is a word": (headers(timelimit="soon"), "'timelimit' header"),
    "a time limit of three": (headers(timelimit=[1, 2, 3]), "'timelimit' header"),
    "retries that are a word": (headers(retries="many"), "'retries' header"),
    "ignore_result that is a word": (headers(ignore_result="yes"), "'ignore_result' header"),
    "headers nested too deep": (headers(x=nested(1000)), "headers are nested deeper"),
    "a wire version that is a word": (headers(agentloop_wire="2"), "'agentloop_wire' header"),
    "a wire version of 0": (headers(agentloop_wire=0), "'agentloop_wire' header"),
    "a wire version that is true": (headers(agentloop_wire=True), "'agentloop_wire' header"),
    "deferrals below 0": (headers(agentloop_wire_deferrals=-1), "'agentloop_wire_deferrals' header"),
}


@pytest.mark.parametrize(("message_headers", "reason"), BAD_HEADERS.values(), ids=BAD_HEADERS.keys())
def test_headers_the_main_process_reads_must_have_celerys_types(message_headers: Any, reason: str) -> None:
    refused = check_message(FakeMessage(message_headers, GOOD))
    assert refused is not None and reason in refused.reason


def test_a_body_over_the_size_limit_is_refused_before_it_is_decoded() -> None:
    message = FakeMessage(headers(), raw=b"x" * (MAX_BODY_BYTES + 1), error=AssertionError("decoded"))
    refused = check_message(message)
    assert refused is not None and refused.reason.startswith(
        f"its body is larger than {MAX_BODY_BYTES} bytes"
    )


def test_a_body_that_cannot_be_decoded_is_refused_with_the_decoders_reason() -> None:
    message = FakeMessage(headers(), raw=b"\x80\x04.", error=ContentDisallowed("Refusing pickle"))
    refused = check_message(message)
    assert refused is not None
    assert (
        refused.reason == "its body cannot be decoded (application/json): ContentDisallowed: Refusing pickle"
    )


def test_a_refused_launch_names_its_run_when_the_run_id_is_usable() -> None:
    def run_of(kwargs: Any) -> tuple[str | None, str | None]:
        rejection = rejection_of(FakeMessage(headers(), [[], kwargs, {}]), "why", [[], kwargs, {}])
        return rejection.run_id, rejection.runnable

    assert run_of({"runnable": "parity.count"}) == ("t-1", "parity.count")
    assert run_of({"runnable": "parity.count", "run_id": "mine"}) == ("mine", "parity.count")
    assert run_of({"run_id": "r" * 300}) == (None, None)  # not a usable id: nothing recorded under it
    assert run_of({"run_id": ["r"], "runnable": {"x": 1}}) == (None, None)
    other = rejection_of(FakeMessage(headers(task="agentloop.progress"), GOOD), "why", GOOD)
    assert other.run_id is None


@pytest.fixture
def edge_app() -> Iterator[Any]:
    store = InMemoryRunStore()
    app = create_app(
        store=store,
        overrides={
            "broker_url": "memory://",
            "result_backend": "cache+memory://",
            "task_default_queue": "edge",
        },
    )
    try:
        yield app
    finally:
        app.close()


def test_every_app_create_app_builds_uses_the_edge_consumer(edge_app: Any) -> None:
    assert edge_app.conf.worker_consumer == f"{EdgeConsumer.__module__}:EdgeConsumer"


def test_a_refused_launch_becomes_a_failed_run_and_a_failed_result(edge_app: Any) -> None:
    run_id = str(uuid.uuid4())
    recorder_of(edge_app).record(
        Rejection(
            reason="kwargs too deep", task="agentloop.launch", task_id=run_id, run_id=run_id, runnable="x"
        )
    )

    record = edge_app.agentloop_dependencies.store.get_run(run_id)
    assert record.status == "failed" and record.runnable == "x"
    assert record.error == {
        "type": "InvalidTaskError",
        "message": "agentloop.launch message rejected at the worker's edge: kwargs too deep",
    }
    with pytest.raises(InvalidTaskError, match="kwargs too deep"):
        edge_app.AsyncResult(run_id).get(timeout=1)


def test_a_refusal_never_rewrites_an_existing_run_or_a_live_result(edge_app: Any) -> None:
    store = edge_app.agentloop_dependencies.store
    store.create_run(run_id="taken", runnable="parity.count", input=1)
    edge_app.backend.store_result("taken", {"n": 1}, "PROGRESS")
    edge_app.backend.store_result("busy", None, "STARTED")

    recorder = recorder_of(edge_app)
    recorder.record(Rejection(reason="bad", task="agentloop.launch", task_id="taken", run_id="taken"))
    recorder.record(Rejection(reason="bad", task="agentloop.run", task_id="busy"))

    assert store.get_run("taken").status == "pending"
    assert edge_app.AsyncResult("taken").state == "PROGRESS"
    assert edge_app.AsyncResult("busy").state == "STARTED"


class AckableMessage(FakeMessage):
    acknowledged = False

    def ack_log_error(self, logger: Any, errors: Any) -> None:
        self.acknowledged = True


def bare_consumer(app: Any, handler: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An :class:`EdgeConsumer` around ``handler`` as Celery's task handler, without a worker."""
    from celery.worker.consumer import Consumer

    monkeypatch.setattr(Consumer, "create_task_handler", lambda self, *args, **kwargs: handler)
    consumer = EdgeConsumer.__new__(EdgeConsumer)
    consumer.app, consumer.event_dispatcher = app, None
    consumer.wire_gate = WireGate(app)
    consumer.connection_errors, consumer.channel_errors = (OSError, KeyError), ()
    return consumer


def test_a_defect_in_celerys_handler_refuses_the_message_instead_of_stopping_the_worker(
    edge_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(message: Any) -> None:
        raise KeyError(
            0
        )  # what Celery's request raised for a JSON object body (a "connection error" on Redis)

    on_task_received = bare_consumer(edge_app, broken, monkeypatch).create_task_handler()
    message = AckableMessage(headers(id="defect"), GOOD)

    on_task_received(message)

    recorder_of(edge_app).close()
    assert message.acknowledged  # once its refusal was recorded
    with pytest.raises(InvalidTaskError, match=r"the worker could not take it \(KeyError\)"):
        edge_app.AsyncResult("defect").get(timeout=1)


def test_a_lost_connection_still_reaches_celery(edge_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def disconnected(message: Any) -> None:
        raise ConnectionResetError("broker went away")

    on_task_received = bare_consumer(edge_app, disconnected, monkeypatch).create_task_handler()
    message = AckableMessage(headers(id="lost"), GOOD)

    with pytest.raises(ConnectionResetError):
        on_task_received(message)
    assert not message.acknowledged


def _depth(value: Any) -> int:
    """The nesting of lists, tuples and mappings in ``value``, the plain recursive way (0: a leaf)."""
    if isinstance(value, Mapping):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


class _Items(dict[str, Any]):
    pass


_nestable = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children)
        | st.dictionaries(st.text(max_size=2), children, max_size=3)
        | st.builds(_Items, st.dictionaries(st.text(max_size=2), children, max_size=2))
    ),
    max_leaves=20,
)


@given(_nestable, st.integers(min_value=0, max_value=6))
@settings(max_examples=400, deadline=None)
def test_the_depth_check_agrees_with_plain_recursion(value: Any, limit: int) -> None:
    """Its fast path for plain leaves and containers, and mapping subclasses, measure as recursion does."""
    assert nests_deeper_than(value, limit) == (_depth(value) > limit)

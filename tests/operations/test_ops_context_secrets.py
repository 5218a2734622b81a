"""A secret in a node's context spec (an API key the context factory needs) never shows in the
exception text of a failing task: not in the worker's log lines, not in the ``task-failed`` event
Flower keeps. The task runs in this process (``Task.apply``), with no broker.

The node's context is what ``orchestration.redaction`` hides of a ``node`` argument; a loop whose
error quotes its context, and a context factory whose refusal quotes the spec, are the two ways
the key gets into an exception's text.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.mocks import TaskMessage

from loops import ProceduralAgentLoop
from orchestration.celery_adapter.app import create_app
from orchestration.celery_adapter.dependencies import dependencies_of
from orchestration.celery_adapter.privacy import RedactingRequest
from orchestration.registry import RunnableRegistry
from orchestration.store import InMemoryRunStore
from orchestration.wire import RUN, WorkflowNode

API_KEY = "sk-live-CONTEXT-KEY-4242"


class QuotesItsContext(ProceduralAgentLoop):
    """Fails its first step with an error that quotes the API key from its context."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"result": None}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        raise PermissionError(f"the model server refused api_key={self.context['api_key']!r}")


def refuse_the_spec(spec: Mapping[str, Any]) -> Any:
    raise ValueError(f"no tenant for api_key {spec['api_key']}")


@pytest.fixture
def app() -> Iterator[Celery]:
    registry = RunnableRegistry()
    registry.register("secrets.quotes_context", QuotesItsContext)
    registry.register("secrets.refused_spec", QuotesItsContext, context_factory=refuse_the_spec)
    store = InMemoryRunStore()
    app = create_app(
        registry=registry,
        store=store,
        overrides={"broker_url": "memory://", "result_backend": "cache+memory://"},
    )
    app.finalize()
    yield app
    app.close()


def node_of(app: Celery, runnable: str) -> dict[str, Any]:
    """A node of a run recorded in the app's store, whose context spec holds the API key."""
    run_id = f"run-{runnable}"
    dependencies_of(app).store.create_run(run_id=run_id, runnable=runnable, input=None)
    return WorkflowNode(run_id=run_id, runnable=runnable, context={"api_key": API_KEY}).to_dict()


RUNNABLES = ["secrets.quotes_context", "secrets.refused_spec"]


@pytest.mark.parametrize("runnable", RUNNABLES)
def test_the_failure_line_and_its_traceback_never_show_the_context_key(
    app: Celery, runnable: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="celery.app.trace"):
        result = app.tasks[RUN].apply(args=(node_of(app, runnable), {"question": "q"}))

    assert result.failed()
    assert API_KEY in str(result.result)  # the error did quote it: there was something to hide
    [line] = [r for r in caplog.records if "raised unexpected" in r.getMessage()]
    assert "<hidden>" in line.getMessage()
    assert "Traceback (most recent call last)" in caplog.text
    assert API_KEY not in caplog.text
    assert API_KEY not in str(vars(line).get("data"))  # what custom log handlers get


class _Eventer:
    enabled = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, type: str, **fields: Any) -> None:
        self.sent.append((type, fields))


@pytest.mark.parametrize("runnable", RUNNABLES)
def test_the_task_failed_event_never_shows_the_context_key(app: Celery, runnable: str) -> None:
    node = node_of(app, runnable)
    result = app.tasks[RUN].apply(args=(node, {"question": "q"}))
    eventer = _Eventer()
    request = RedactingRequest(
        TaskMessage(RUN, args=(node, {"question": "q"})),
        app=app,
        task=app.tasks[RUN],
        eventer=eventer,
        hostname="w@h",
    )

    request.send_event("task-failed", exception=repr(result.result), traceback=result.traceback)

    [(kind, fields)] = eventer.sent
    assert kind == "task-failed" and API_KEY in repr(result.result) + str(result.traceback)
    assert "<hidden>" in fields["exception"]
    assert API_KEY not in fields["exception"] and API_KEY not in fields["traceback"]
    assert API_KEY not in request.argsrepr  # and the node shows where it is, not its context
    assert "node=<node runnable=" in request.argsrepr

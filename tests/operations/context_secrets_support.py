"""A Celery app (``memory://``, no worker) whose runnables fail with an API key from their node's
context spec in the error's text: the loop quotes its context, or the context factory quotes the
spec it refuses. Shared by the tests of what is shown (``test_ops_context_secrets.py``) and of
what is stored (``test_ops_context_secrets_stored.py``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from celery import Celery

from agentloop.loops import ProceduralAgentLoop
from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import WorkflowNode

API_KEY = "sk-live-CONTEXT-KEY-4242"


class QuotesItsContext(ProceduralAgentLoop):
    """Fails its first step with an error that quotes the API key from its context."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"result": None}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        raise PermissionError(f"the model server refused api_key={self.context['api_key']!r}")


def refuse_the_spec(spec: Mapping[str, Any]) -> Any:
    raise ValueError(f"no tenant for api_key {spec['api_key']}")


@contextmanager
def app_with_a_key_in_its_contexts() -> Iterator[Celery]:
    """The app, its two runnables registered, on an in-memory run store."""
    registry = RunnableRegistry()
    registry.register("secrets.quotes_context", QuotesItsContext)
    registry.register("secrets.refused_spec", QuotesItsContext, context_factory=refuse_the_spec)
    store = InMemoryRunStore()
    app = create_app(
        registry=registry,
        store=store,
        overrides={"broker_url": "memory://", "result_backend": "cache+memory://"},
    )
    try:
        app.finalize()
        yield app
    finally:
        app.close()


def node_of(app: Celery, runnable: str) -> dict[str, Any]:
    """A node of a run recorded in the app's store, whose context spec holds the API key."""
    run_id = f"run-{runnable}"
    dependencies_of(app).store.create_run(run_id=run_id, runnable=runnable, input=None)
    return WorkflowNode(run_id=run_id, runnable=runnable, context={"api_key": API_KEY}).to_dict()


#: The two ways the key gets into an exception's text.
RUNNABLES = ["secrets.quotes_context", "secrets.refused_spec"]

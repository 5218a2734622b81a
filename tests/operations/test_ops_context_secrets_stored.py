"""What is stored of a failing task whose node's context spec holds an API key: the exception the
result backend keeps and the run record with its events never show the key.

These pin a gap found while testing ``test_ops_context_secrets.py``: the logs and the
``task-failed`` event are scrubbed, but the exception as raised (``AsyncResult.result``, Flower's
``/api/task/result``) and the run store's error and failure events (``agentloop.progress``,
``WorkflowFailedError``, ``agentloop runs show``) carry the key as the error quoted it.
"""

from __future__ import annotations

import pytest
from celery import Celery
from context_secrets_support import API_KEY, RUNNABLES, node_of

from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.wire import RUN


@pytest.mark.parametrize("runnable", RUNNABLES)
def test_the_exception_the_result_backend_stores_never_shows_the_context_key(
    keyed_app: Celery, runnable: str
) -> None:
    # Celery stores the exception the task raised (its type and its arguments): that is what
    # ``AsyncResult(id).result``, ``result.get()`` and Flower's /api/task/result show.
    result = keyed_app.tasks[RUN].apply(args=(node_of(keyed_app, runnable), {"question": "q"}))

    assert result.failed()
    assert API_KEY not in repr(result.result)
    assert API_KEY not in str(result.traceback)


@pytest.mark.parametrize("runnable", RUNNABLES)
def test_the_run_record_and_its_events_never_show_the_context_key(keyed_app: Celery, runnable: str) -> None:
    # what ``agentloop.progress``, ``RunHandle`` / ``WorkflowFailedError`` and ``agentloop runs show`` read
    node = node_of(keyed_app, runnable)
    keyed_app.tasks[RUN].apply(args=(node, {"question": "q"}))
    store = dependencies_of(keyed_app).store

    record = store.get_run(node["run_id"])
    assert record is not None and record.status == "failed"
    assert API_KEY not in str(record.error)
    assert API_KEY not in str([event for _, event in store.events(node["run_id"])])

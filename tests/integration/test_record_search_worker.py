"""The demo workflow end to end on production-shaped infrastructure: a real prefork worker
over Redis, PostgreSQL for the run store and the records, and the model behind the real
``openai`` SDK, served by a local OpenAI-protocol server answering like the offline model."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from agentloop.examples.record_search.offline import offline_responders
from agentloop.examples.record_search.schema import companies_table
from agentloop.examples.record_search.workflows import DEMO, DEMO_QUESTIONS
from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.store import create_engine_for, open_store
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    Reply,
    reply_tool_call,
)
from tests.services.postgres import (
    PostgresUnavailableError,
    private_postgres_database,
    skip_or_fail,
)
from tests.services.redis_server import ServiceUnavailable, private_redis_server
from tests.services.worker import run_worker_process

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sk-test-worker-key"


def answer_like_the_offline_model(body: dict[str, Any]) -> Reply:
    name = body["tool_choice"]["function"]["name"]
    respond: Callable[..., Any] = offline_responders()[name]
    return reply_tool_call(name, respond(body["tools"][0]["function"], body["messages"][0]["content"], []))


def count_companies(database_url: str, *, country: str, industry: str) -> int:
    """How many companies of the sample data are in ``country`` and ``industry``, asked of the database."""
    engine = create_engine_for(database_url)
    try:
        with engine.connect() as connection:
            query = select(func.count()).where(
                companies_table.c.country == country, companies_table.c.industry == industry
            )
            return int(connection.execute(query).scalar_one())
    finally:
        engine.dispose()


def test_the_demo_runs_on_a_worker_with_postgresql_and_the_openai_protocol() -> None:
    with ExitStack() as stack:
        try:
            database_url = stack.enter_context(private_postgres_database())
        except PostgresUnavailableError as unavailable:
            skip_or_fail(str(unavailable))
        try:
            redis = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        server = stack.enter_context(
            OpenAICompatibleServer(api_key=API_KEY, responder=answer_like_the_offline_model)
        )
        store, _ = open_store(database_url)
        stack.callback(store.engine.dispose)
        env = {
            "DATABASE_URL": database_url,
            "OPENAI_API_KEY": API_KEY,
            "OPENAI_BASE_URL": server.base_url,
            "PYTHONPATH": str(ROOT),
        }
        worker = stack.enter_context(
            run_worker_process(
                broker_url=redis.url,
                result_backend=redis.url,
                imports=["agentloop.examples.record_search.workflows"],
                env=env,
                concurrency=2,
            )
        )
        app = create_app(overrides={"broker_url": redis.url, "result_backend": redis.url})
        stack.callback(app.close)
        questions = list(DEMO_QUESTIONS)
        handle = CeleryAgentRunner.create(runnable=DEMO, context={}, app=app, store=store).request_sync(
            input={"questions": questions}
        )
        result = handle.wait_sync(timeout=120)
        log = worker.log_text()
        record = store.get_run(handle.run_id)
        german_software = count_companies(database_url, country="Germany", industry="Software")

    assert result["question_count"] == len(questions)
    answered = {entry["question"]: entry["answer"] for entry in result["answers"]}
    germany = answered["Which software companies are in Germany?"]
    # the answer counts what the database holds: the sample data's German software companies
    assert german_software > 0 and germany["found_count"] == german_software
    assert germany["message"].startswith("[offline model] Found")
    assert germany["answered_by"] != "offline"  # the OpenAI processor answered, over HTTP
    assert answered["What's the weather like today?"]["records"] == []
    # Every forced call went through the wire protocol, none with the key in the worker's log.
    assert len(server.completion_requests) >= 2 * (len(questions) - 1)
    assert API_KEY not in log
    assert record is not None and record.status == "succeeded"
    assert record.input_tokens > 0 and record.output_tokens > 0  # usage summed over the run's tasks

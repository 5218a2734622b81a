"""The record-search example's first tasks, many at once on a new database: one sets the sample
data up while the others wait, and an infrastructure error is never passed off as a bad spec."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from durability_support import running_rig
from durability_workflows import Count
from sqlalchemy.exc import IntegrityError

from agentloop.orchestration.errors import ContextSpecError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.wire import LAUNCH
from tests.services.postgres import (
    PostgresUnavailableError,
    postgres_server,
    private_database,
    skip_or_fail,
)

pytestmark = pytest.mark.integration
PROCESSES = 8


@pytest.fixture
def new_database() -> Iterator[str]:
    """A new, empty PostgreSQL database: not migrated, no sample tables."""
    with ExitStack() as stack:
        try:
            admin = stack.enter_context(postgres_server())
        except PostgresUnavailableError as error:
            skip_or_fail(str(error))
        yield stack.enter_context(private_database(admin))


def _set_up(url: str, barrier: Any) -> str:
    from agentloop.examples.record_search.resources import open_resources

    barrier.wait(timeout=60)
    try:
        resources = open_resources(url)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    counts = resources.record_counts
    resources.dispose()
    return f"ok {sorted(counts.items())}"


def test_processes_setting_up_one_new_database_at_once_all_succeed(new_database: str) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Manager().Barrier(PROCESSES)
    with context.Pool(PROCESSES) as pool:
        answers = pool.starmap(_set_up, [(new_database, barrier)] * PROCESSES)
    assert all(answer.startswith("ok ") for answer in answers), answers
    assert len(set(answers)) == 1  # every one sees the same complete sample data


def test_concurrent_first_tasks_on_a_worker_all_answer(new_database: str, redis_url: str) -> None:
    modules = ("agentloop.examples.record_search.workflows",)
    with running_rig(
        new_database, redis_url, retry_seconds=30, concurrency=4, imports=modules
    ) as durability_rig:
        questions = ["Which software companies are in Germany?", "List the won deals"] * 4
        results = [
            durability_rig.app.send_task(
                LAUNCH, kwargs={"runnable": "record_search.ask", "input": {"message": q}}
            )
            for q in questions
        ]
        answers = [result.get(timeout=120) for result in results]
    assert all(isinstance(answer, dict) for answer in answers), answers


def test_only_errors_about_the_specs_content_are_context_spec_errors() -> None:
    def bad_content(spec: Any) -> Any:
        raise ValueError("no such tenant")

    def database_failed(spec: Any) -> Any:
        raise IntegrityError("CREATE TABLE rs_companies", {}, Exception("duplicate key value"))

    def bug(spec: Any) -> Any:
        raise AttributeError("'NoneType' object has no attribute 'engine'")

    registry = RunnableRegistry()
    with pytest.raises(ContextSpecError, match="rejected the spec: no such tenant"):
        registry.register("a", Count, context_factory=bad_content).build_context({})
    with pytest.raises(IntegrityError):
        registry.register("b", Count, context_factory=database_failed).build_context({})
    with pytest.raises(AttributeError):
        registry.register("c", Count, context_factory=bug).build_context({})

"""The record-search workflows on real Celery: an embedded worker on ``memory://`` runs
``record_search.demo`` (a chord of agent loops, then the summary stage) and ``record_search.ask``,
each task building its context from the JSON spec with the workflows' context factory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentloop.examples.record_search import NO_PLAN_MESSAGE, workflows
from agentloop.examples.record_search.resources import dispose_shared_resources
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.errors import ContextSpecError, WorkflowFailedError
from agentloop.orchestration.registry import RunnableRegistry

QUESTIONS = [
    "Which software companies are in Germany?",
    "Show me deals over 50000 in negotiation",
    "List the won deals",
    "Tell me a joke",
]


@pytest.fixture(scope="module", autouse=True)
def _release_shared_engines() -> Iterator[None]:
    yield
    dispose_shared_resources()


def run(rig: Any, name: str, input: Any, context: dict[str, Any]) -> tuple[Any, Any]:
    runner = CeleryAgentRunner.create(runnable=name, context=context, app=rig.app, store=rig.store)
    handle = runner.request_sync(input=input)
    return handle, handle.wait_sync(timeout=60)


REGISTRY = RunnableRegistry.from_modules([workflows.__name__])


def test_the_module_declares_the_workflows() -> None:
    assert workflows.ASK in REGISTRY and workflows.DEMO in REGISTRY
    assert REGISTRY.get(workflows.DEMO).runnable is workflows.RecordSearchDemo
    for part in (workflows.RecordSearchBatch, workflows.RecordSearchStage, workflows.SummarizeAnswers):
        assert REGISTRY.name_of(part)  # the stages and the branch runnable came along
    REGISTRY.include_module(workflows.__name__)  # idempotent
    assert REGISTRY.get(workflows.ASK).runnable is workflows.RecordSearchAgentLoop


def test_the_demo_runs_on_a_celery_worker(memory_celery: Any, record_db_url: str, no_model_env: None) -> None:
    handle, result = run(
        memory_celery, workflows.DEMO, {"questions": QUESTIONS}, {"database_url": record_db_url}
    )

    assert result["question_count"] == 4 and result["answered_count"] == 4 and result["failed_count"] == 0
    per_question = {entry["question"]: entry for entry in result["per_question"]}
    assert per_question[QUESTIONS[0]]["found_count"] > 0
    assert per_question[QUESTIONS[1]]["found_count"] > 0
    assert per_question[QUESTIONS[2]]["is_truncated"] is True
    assert per_question[QUESTIONS[2]]["shown_count"] == 20 < per_question[QUESTIONS[2]]["found_count"]
    assert per_question[QUESTIONS[3]]["found_count"] == 0
    assert {entry["answered_by"] for entry in result["per_question"]} == {"offline"}
    assert result["total_found"] == sum(entry["found_count"] for entry in result["per_question"])
    assert result["summary"].startswith(
        f"3 of 4 questions found records: {result['total_found']} records in all"
    )

    answers = {entry["question"]: entry["answer"] for entry in result["answers"]}
    germany = answers[QUESTIONS[0]]
    assert germany["question"] == QUESTIONS[0]
    assert all(r["fields"]["country"] == "Germany" for r in germany["records"])
    assert germany["message"].startswith("[offline model] Found")
    assert answers[QUESTIONS[3]]["message"] == NO_PLAN_MESSAGE

    events = [event for _, event in memory_celery.store.events(handle.run_id)]
    paths = {event["path"] for event in events}
    assert {"", "pipeline/0", "pipeline/1"} <= paths
    assert {f"pipeline/0/branch/q{i}" for i in range(1, 5)} <= paths
    phases = {(e["path"], e["phase"]) for e in events}
    assert ("pipeline/0/branch/q1", "execute") in phases and ("pipeline/0/branch/q4", "plan") in phases
    record = memory_celery.store.get_run(handle.run_id)
    assert record is not None and record.status == "succeeded"


def test_one_question_runs_as_record_search_ask(
    memory_celery: Any, record_db_url: str, no_model_env: None
) -> None:
    _, result = run(
        memory_celery, workflows.ASK, {"message": "contacts at Acme"}, {"database_url": record_db_url}
    )
    assert result["found_count"] > 0 and all(r["category"] == "contacts" for r in result["records"])
    _, from_spec = run(
        memory_celery, workflows.ASK, {}, {"database_url": record_db_url, "message": "companies in Spain"}
    )
    assert from_spec["found_count"] > 0 and all(
        r["fields"]["country"] == "Spain" for r in from_spec["records"]
    )


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"openai_api_key": "sk-live-123"}, "unknown context spec keys"),
        ({"database_url": "postgresql://user:secret@db/records"}, "password"),
        ({"database_url": 5}, "non-empty string"),
        ({"message": ["x"]}, "must be a string"),
    ],
)
def test_the_context_spec_carries_no_secrets(spec: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        workflows.build_context(spec)
    with pytest.raises(ContextSpecError, match=reason):
        REGISTRY.get(workflows.ASK).build_context(spec)


def test_a_rejected_spec_fails_the_run_clearly(memory_celery: Any) -> None:
    with pytest.raises(WorkflowFailedError) as failure:
        run(memory_celery, workflows.ASK, {"message": "companies"}, {"api_key": "sk-live-123"})
    assert failure.value.error_type == "ContextSpecError"
    assert "sk-live-123" not in str(failure.value)


@pytest.mark.parametrize("bad", [{"questions": "companies"}, {"questions": [""]}, {"questions": ["q"] * 21}])
def test_a_bad_batch_input_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        workflows.read_questions(bad)
    assert workflows.read_questions({}) == list(workflows.DEMO_QUESTIONS)

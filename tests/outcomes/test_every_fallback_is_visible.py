"""Every fallback is visible (issue 23), on the inline runner and on a real worker over Redis: a step
that returns its fallback ends the run ``degraded``, with a ``model_unavailable`` event naming the
step and the reason. A typed step with no row in the tool store sends its type's schema and
succeeds. The workflows are in ``tests/workflows/fallback.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from agentloop.loops import InlineAgentRunner, ProgressEvent
from agentloop.loops.run_outcome import failures_in
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.testing import ProgressRecorder

pytestmark = pytest.mark.integration

DOWN = "openai: 503 server error after 4 attempts: upstream unavailable"


@dataclass(frozen=True)
class Ended:
    status: str
    result: Any
    failures: list[tuple[str, str, str]]  # (path, step, reason)
    failure_events: list[tuple[str, str, str]]  # (path, runnable, phase)


def run_inline(registry: RunnableRegistry, name: str, input: Any) -> Ended:
    registration = registry.get(name)
    recorder = ProgressRecorder()
    runner = InlineAgentRunner.create(runnable=registration.runnable, context=registration.build_context({}))
    outcome = runner.request_outcome_sync(input=input, on_progress=recorder)
    return ended(outcome.status, outcome.result, [event.to_dict() for event in recorder.events])


def run_on_celery(rig: Any, name: str, input: Any) -> Ended:
    handle = CeleryAgentRunner.create(runnable=name, app=rig.app, store=rig.store).request_sync(input=input)
    result = handle.wait_sync(timeout=60)
    return ended(handle.status, result, [event for _, event in rig.store.events(handle.run_id)])


def ended(status: str, result: Any, events: list[dict[str, Any]]) -> Ended:
    failures = [(f.path, f.action, f.reason) for f in failures_in(events)]
    shown = [
        (e["path"], e["runnable"], e["phase"])
        for e in (ProgressEvent.from_dict(event).to_dict() for event in events)
        if e["phase"] == "model_unavailable"
    ]
    return Ended(status=status, result=result, failures=failures, failure_events=shown)


@pytest.fixture(params=["inline", "celery"])
def run(request: pytest.FixtureRequest, parity_registry: RunnableRegistry) -> Any:
    if request.param == "inline":
        return lambda name, input: run_inline(parity_registry, name, input)
    rig = request.getfixturevalue("redis_celery")
    return lambda name, input: run_on_celery(rig, name, input)


def test_a_raw_request_that_failed_degrades_the_run_and_names_the_step(run: Any) -> None:
    outcome = run("fallbacks.raw", "[down] why?")

    assert (outcome.status, outcome.result) == ("degraded", f"(no answer: {DOWN})")
    assert outcome.failures == [("", "model_request", f"model error: {DOWN}")]
    assert outcome.failure_events == [("", "model_request", "model_unavailable")]


def test_a_raw_request_that_succeeded_leaves_the_run_succeeded(run: Any) -> None:
    outcome = run("fallbacks.raw", "why?")

    assert (outcome.status, outcome.result, outcome.failures) == ("succeeded", "plain answer to why?", [])


def test_an_answer_invalid_after_its_retries_degrades_the_run(run: Any) -> None:
    outcome = run("fallbacks.typed", {"question": "[invalid] why?"})

    assert (outcome.status, outcome.result) == ("degraded", None)
    ((path, step, reason),) = outcome.failures
    assert (path, step) == ("", "reply")
    assert reason == "invalid arguments: text: Input should be a valid string (after 2 tries)"


def test_a_typed_step_without_a_row_in_the_tool_store_needs_no_setup(run: Any) -> None:
    outcome = run("fallbacks.typed", {"question": "why?"})

    assert (outcome.status, outcome.result, outcome.failures) == ("succeeded", {"text": "ok"}, [])


def test_a_forced_tool_without_its_schema_degrades_the_run(run: Any) -> None:
    outcome = run("fallbacks.plain", {"question": "why?"})

    assert (outcome.status, outcome.result) == ("degraded", None)
    assert outcome.failures == [("", "plain_reply", "tool schema missing or unparsable")]


def test_a_model_failure_of_a_typed_step_degrades_the_run(run: Any) -> None:
    outcome = run("fallbacks.typed", {"question": "[down] why?"})

    assert (outcome.status, outcome.result) == ("degraded", None)
    assert outcome.failures == [("", "reply", f"model error: {DOWN}")]


def test_an_ai_driven_turn_whose_model_call_failed_degrades_the_run_it_recovers_in(run: Any) -> None:
    outcome = run("fallbacks.ai_down_once", "why?")

    # the loop tried again and answered, but the record says a model call failed on the way
    assert (outcome.status, outcome.result["answer"]) == ("degraded", "answered on the second turn")
    assert outcome.failures == [("", "AskAround turn 1", f"model error: {DOWN}")]

"""A model call that failed after its retries degrades the run (or fails it, by the action's
policy) instead of passing for success; in-process the runner returns the result and says so."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from agentloop.actions import (
    AiResponse,
    ForcedToolAction,
    ModelFailure,
    ModelFailurePolicy,
    ModelUnavailableError,
    report_model_failure,
    use_degradation_sink,
)
from agentloop.loops import (
    BaseAgentLoop,
    InlineAgentRunner,
    ProgressEvent,
    ProgressStatus,
    RunScope,
    use_scope,
)
from agentloop.loops.run_outcome import (
    DegradationRecorder,
    RunOutcome,
    degradation_error,
    degraded_event,
    failures_in,
)
from agentloop.pipelines import BaseCompositeAgent, Branch
from agentloop.testing import (
    ProgressRecorder,
    ScriptedModel,
    error_reply,
    text_reply,
    tool_call,
)

TOOL = {
    "name": "answer",
    "description": "Answer the question.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}


class Tools:
    def get_payload(self, tool_id: str) -> Any:
        return TOOL if tool_id == "answer" else None


class Answer(ForcedToolAction):
    name = "answer"
    tool_id_key = "answer_tool_id"

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return f"Answer: {arguments['question']}"

    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        text = parsed.get("text")
        return {"text": text} if isinstance(text, str) and text else None

    def fallback(self, *, arguments: dict[str, Any], context: Any, reason: str) -> Any:
        return {"text": "no answer"}


class StrictAnswer(Answer):
    on_model_failure = ModelFailurePolicy.FAIL


class Ask(BaseAgentLoop):
    """One question, one forced call; the action class comes from the context."""

    max_iterations = 1

    def create_initial_state(self, *, input: Any) -> Any:
        return {"question": input, "answer": None}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        action = self.context.get("action", Answer).create()
        answer = await action.run(arguments={"question": state["question"]}, context=self.context)
        return {**state, "answer": answer}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["answer"] is not None

    def build_result(self, *, state: Any) -> Any:
        return state["answer"]


class Fan(BaseCompositeAgent):
    branch_runnables = (Ask,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Ask, input=question, key=str(i)) for i, question in enumerate(input)]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


def context(*replies: AiResponse, action: type[ForcedToolAction] = Answer) -> dict[str, Any]:
    return {
        "processor": ScriptedModel(list(replies)),
        "tool_store": Tools(),
        "answer_tool_id": "answer",
        "action": action,
    }


def phases(recorder: ProgressRecorder, path: str = "") -> list[tuple[str, str]]:
    return [(e.phase, str(e.status)) for e in recorder.events if e.path == path]


async def test_a_failed_model_call_returns_the_fallback_and_the_run_ends_degraded() -> None:
    recorder = ProgressRecorder()
    runner = InlineAgentRunner.create(
        runnable=Ask, context=context(error_reply("429 rate limited after 4 attempts"))
    )

    outcome = await runner.request_outcome(input="why?", on_progress=recorder)

    assert outcome.result == {"text": "no answer"}
    assert outcome.status == "degraded" and outcome.degraded
    assert outcome.failures == (
        ModelFailure(action="answer", reason="model error: 429 rate limited after 4 attempts", path=""),
    )
    assert phases(recorder) == [
        ("start", "started"),
        ("model_unavailable", "progress"),
        ("iteration", "progress"),
        ("done", "progress"),  # one terminal event per run: the degraded one
        ("degraded", "completed"),
    ]
    last = recorder.events[-1]
    assert last.runnable == "Ask"
    assert last.data["status"] == "degraded"
    assert last.data["failures"] == ({"action": "answer", "reason": outcome.failures[0].reason, "path": ""},)


async def test_request_returns_the_result_of_a_degraded_run() -> None:
    runner = InlineAgentRunner.create(runnable=Ask, context=context(text_reply("I would rather chat")))

    assert await runner.request(input="why?") == {"text": "no answer"}


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (error_reply("500 server error after 4 attempts"), "model error: 500 server error after 4 attempts"),
        (
            error_reply("request timed out after 2 attempts"),
            "model error: request timed out after 2 attempts",
        ),
        # a wrong answer is asked again (output_retries = 1): the model answers wrongly twice
        (text_reply("no tool for me"), "model did not call 'answer' (after 2 tries)"),
        (tool_call("answer", "{broken"), "tool arguments are not a JSON object (after 2 tries)"),
        (tool_call("answer", "[1]"), "tool arguments are not a JSON object (after 2 tries)"),
    ],
    ids=["500", "timeout", "no call", "broken json", "not an object"],
)
async def test_every_kind_of_failed_call_degrades(reply: AiResponse, reason: str) -> None:
    runner = InlineAgentRunner.create(runnable=Ask, context=context(reply, reply))

    outcome = await runner.request_outcome(input="q")

    assert [failure.reason for failure in outcome.failures] == [reason]


async def test_an_answer_that_normalize_rejects_falls_back_and_degrades_the_run() -> None:
    outcome = await InlineAgentRunner.create(
        runnable=Ask, context=context(tool_call("answer", {"text": ""}))
    ).request_outcome(input="q")

    assert outcome.result == {"text": "no answer"}
    assert outcome.status == "degraded"
    rejected = ("answer", "model output rejected by normalize")
    assert [(f.action, f.reason) for f in outcome.failures] == [rejected]


async def test_a_healthy_run_succeeds_without_a_degraded_event() -> None:
    recorder = ProgressRecorder()
    outcome = await InlineAgentRunner.create(
        runnable=Ask, context=context(tool_call("answer", {"text": "42"}))
    ).request_outcome(input="q", on_progress=recorder)

    assert outcome == RunOutcome(result={"text": "42"})
    assert outcome.status == "succeeded"
    assert phases(recorder)[-1] == ("done", "completed")


async def test_the_fail_policy_fails_the_run_with_the_error() -> None:
    recorder = ProgressRecorder()
    runner = InlineAgentRunner.create(
        runnable=Ask, context=context(error_reply("503 unavailable"), action=StrictAnswer)
    )

    with pytest.raises(ModelUnavailableError) as caught:
        await runner.request(input="q", on_progress=recorder)

    assert caught.value.failure == ModelFailure(action="answer", reason="model error: 503 unavailable")
    assert str(caught.value) == "the model is unavailable for answer: model error: 503 unavailable"
    assert phases(recorder) == [("start", "started"), ("error", "failed")]


class DownTools:
    def get_payload(self, tool_id: str) -> Any:
        raise ConnectionError("run store unreachable for 60s")


async def test_a_tool_store_that_cannot_answer_degrades_the_run_or_fails_it_by_policy() -> None:
    """The schema could not be read, so the model was never asked: not a success with a fallback."""
    runner = InlineAgentRunner.create(runnable=Ask, context={**context(), "tool_store": DownTools()})

    outcome = await runner.request_outcome(input="why?")

    assert outcome.status == "degraded" and outcome.result == {"text": "no answer"}
    reason = "tool store failed: ConnectionError: run store unreachable for 60s"
    assert outcome.failures == (ModelFailure(action="answer", reason=reason),)
    strict = InlineAgentRunner.create(
        runnable=Ask, context={**context(action=StrictAnswer), "tool_store": DownTools()}
    )
    with pytest.raises(ModelUnavailableError, match="tool store failed"):
        await strict.request(input="why?")


async def test_each_failure_is_reported_at_its_branch_path() -> None:
    recorder = ProgressRecorder()
    model = ScriptedModel([tool_call("answer", {"text": "fine"}), error_reply("overloaded")])
    runner = InlineAgentRunner.create(
        runnable=Fan, context={"processor": model, "tool_store": Tools(), "answer_tool_id": "answer"}
    )
    # Branches run concurrently: the first to ask gets the first reply.
    outcome = await runner.request_outcome(input=["a", "b"], on_progress=recorder)

    assert sorted(map(json.dumps, outcome.result)) == sorted(
        map(json.dumps, [{"text": "fine"}, {"text": "no answer"}])
    )
    (failure,) = outcome.failures
    assert failure.path in ("branch/0", "branch/1")
    assert ("model_unavailable", "progress") in phases(recorder, failure.path)
    assert phases(recorder)[-2:] == [("done", "progress"), ("degraded", "completed")]


async def test_the_runner_path_is_the_root_of_the_failures_and_of_the_degraded_event() -> None:
    recorder = ProgressRecorder()
    outcome = await InlineAgentRunner.create(
        runnable=Ask, context=context(error_reply("down"))
    ).request_outcome(input="q", on_progress=recorder, path="outer/3")

    assert outcome.failures[0].path == "outer/3"
    assert (recorder.events[-1].path, recorder.events[-1].phase) == ("outer/3", "degraded")


async def test_an_action_run_outside_any_run_only_logs_the_failure(caplog: pytest.LogCaptureFixture) -> None:
    value = await Answer.create().run(arguments={"question": "q"}, context=context(error_reply("down")))

    assert value == {"text": "no answer"}
    assert "the model was unavailable for answer at (root)" in caplog.text


async def test_a_scope_hands_its_sink_and_path_to_the_steps_inside() -> None:
    sink = DegradationRecorder(run_id="r1")
    with use_scope(RunScope(run_id="r1", degradation=sink).child("branch/x")):
        await report_model_failure(action="a", reason="gone")
    with use_degradation_sink(None):
        await report_model_failure(action="b", reason="ignored")

    assert sink.failures == (ModelFailure(action="a", reason="gone", path="branch/x"),)


async def test_an_async_sink_is_awaited_and_a_failing_progress_callback_is_only_logged() -> None:
    seen: list[ModelFailure] = []

    class AsyncSink:
        async def degraded(self, failure: ModelFailure) -> None:
            await asyncio.sleep(0)
            seen.append(failure)

    def broken(event: ProgressEvent) -> None:
        raise RuntimeError("display gone")

    with use_degradation_sink(AsyncSink(), path="p"):
        await report_model_failure(action="a", reason="r")
    recorder = DegradationRecorder(run_id="r", on_progress=broken)
    await recorder.degraded(ModelFailure(action="a", reason="r"))

    assert seen == [ModelFailure(action="a", reason="r", path="p")]
    assert len(recorder.failures) == 1


def test_failures_and_the_degraded_event_round_trip_through_stored_events() -> None:
    failures = (
        ModelFailure(action="plan", reason="429", path="branch/q1"),
        ModelFailure(action="compose", reason="timeout", path="branch/q2"),
    )
    recorder_events = [
        ProgressEvent.from_json(
            json.dumps(
                {
                    "run_id": "r",
                    "path": f.path,
                    "runnable": f.action,
                    "iteration": 0,
                    "max_iterations": 0,
                    "phase": "model_unavailable",
                    "status": "progress",
                    "data": f.to_dict(),
                }
            )
        ).to_dict()
        for f in (*failures, failures[0])  # a redelivered task reports its failure again
    ]
    final = degraded_event("r", "Demo", failures)

    assert failures_in(recorder_events) == failures
    assert ModelFailure.from_dict(failures[0].to_dict()) == failures[0]
    assert ProgressEvent.from_json(final.to_json()) == final
    assert failures_in([final.to_dict()]) == ()  # the final event is not a failure of its own
    assert degradation_error(failures) == {
        "type": "ModelUnavailable",
        "message": "the model was unavailable for plan at 'branch/q1': 429 (and 1 more)",
        "failures": [f.to_dict() for f in failures],
    }


@pytest.mark.parametrize(
    ("reply", "kind", "error_type", "message"),
    [
        (
            error_reply("500 server error"),
            "unavailable",
            "ModelUnavailable",
            "the model was unavailable for answer at (root): model error: 500 server error",
        ),
        (
            text_reply("no tool for me"),
            "invalid_output",
            "InvalidModelOutput",
            "the model gave an invalid answer for answer at (root): model did not call 'answer'"
            " (after 2 tries)",
        ),
        (
            tool_call("answer", "{broken"),
            "invalid_output",
            "InvalidModelOutput",
            "the model gave an invalid answer for answer at (root): tool arguments are not a JSON object"
            " (after 2 tries)",
        ),
        (
            tool_call("answer", {"text": ""}),
            "invalid_output",
            "InvalidModelOutput",
            "the model gave an invalid answer for answer at (root): model output rejected by normalize",
        ),
    ],
    ids=["model error", "no call", "broken json", "normalize rejects"],
)
async def test_an_invalid_answer_is_named_apart_from_an_unavailable_model(
    reply: AiResponse, kind: str, error_type: str, message: str
) -> None:
    recorder = ProgressRecorder()

    outcome = await InlineAgentRunner.create(runnable=Ask, context=context(reply, reply)).request_outcome(
        input="q", on_progress=recorder
    )

    assert [failure.kind for failure in outcome.failures] == [kind]
    assert outcome.error is not None
    assert (outcome.error["type"], outcome.error["message"]) == (error_type, message)
    # the events keep the kind, so a worker's record (read back from them) names it the same way
    stored = [event.to_dict() for event in recorder.events]
    assert degradation_error(failures_in(stored)) == outcome.error


async def test_the_fail_policy_raises_invalid_output_for_an_invalid_answer() -> None:
    from agentloop.actions import InvalidModelOutputError

    runner = InlineAgentRunner.create(
        runnable=Ask,
        context=context(tool_call("answer", "{broken"), tool_call("answer", "{"), action=StrictAnswer),
    )

    with pytest.raises(InvalidModelOutputError, match="the model gave no valid answer for answer"):
        await runner.request(input="q")


@pytest.mark.parametrize(
    "wrong",
    [text_reply("It is 42."), tool_call("answer", "{broken"), tool_call("answer", '["42"]')],
    ids=["text only", "malformed json", "not an object"],
)
async def test_a_wrong_answer_is_asked_again_under_output_retries(wrong: AiResponse) -> None:
    model = ScriptedModel()
    model.push(wrong, tool_call("answer", {"text": "42"}))

    outcome = await InlineAgentRunner.create(
        runnable=Ask, context={"processor": model, "tool_store": Tools(), "answer_tool_id": "answer"}
    ).request_outcome(input="q")

    assert (outcome.status, outcome.result) == ("succeeded", {"text": "42"})
    assert len(model.requests) == 2  # the second try, told what was wrong
    told = model.requests[1].history_messages[-1]
    assert "Call answer" in str(told["content"]) and told["role"] in ("user", "tool")


async def test_no_retry_is_asked_when_output_retries_is_0() -> None:
    class OneTry(Answer):
        output_retries = 0

    model = ScriptedModel()
    model.push(text_reply("It is 42."), tool_call("answer", {"text": "42"}))

    outcome = await InlineAgentRunner.create(
        runnable=Ask,
        context={"processor": model, "tool_store": Tools(), "answer_tool_id": "answer", "action": OneTry},
    ).request_outcome(input="q")

    assert outcome.status == "degraded" and len(model.requests) == 1
    assert [f.reason for f in outcome.failures] == ["model did not call 'answer'"]


async def test_a_degraded_run_has_one_terminal_event_and_the_kit_holds_every_runnable_to_it() -> None:
    from agentloop.testing import assert_event_contract, check_runnable

    report = await check_runnable(Ask, input="why?", context=context(error_reply("overloaded")))

    ends = [(e.phase, str(e.status)) for e in report.events if e.path == "" and str(e.status) != "progress"]
    assert ends == [("start", "started"), ("degraded", "completed")]
    healthy = await check_runnable(Ask, input="why?", context=context(tool_call("answer", {"text": "yes"})))
    assert [e.phase for e in healthy.events if str(e.status) == "completed"] == ["done"]  # unchanged
    # what a degraded root emitted before: two terminal events on one path, which the kit refuses
    two_ends = [
        *report.events[:-2],
        replace(report.events[-2], status=ProgressStatus.COMPLETED),
        report.events[-1],
    ]
    with pytest.raises(AssertionError, match="out of order"):
        assert_event_contract(two_ends)

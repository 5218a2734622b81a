"""``TypedToolAction``: a forced tool call whose arguments come back as a validated pydantic instance,
and whose refused answers go back to the model for another try."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationInfo, field_validator
from typed_workflows import Label, LabelTicket

from agentloop import (
    InlineAgentRunner,
    InMemoryToolStore,
    InMemoryUsageMeter,
    InvalidModelOutputError,
    OfflineModel,
    ProgressEvent,
    TypedToolAction,
    Usage,
    sync_tools,
    use_meter,
)
from agentloop.testing import ScriptedModel, error_reply, tool_call


def context_for(processor: Any, *actions: type[TypedToolAction[Any]]) -> dict[str, Any]:
    store = InMemoryToolStore()
    sync_tools(store, actions or [LabelTicket])
    return {"processor": processor, "tool_store": store}


def test_names_ids_and_the_output_type_come_from_the_declaration() -> None:
    class Plain(TypedToolAction[Label]):
        def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
            return "Label it."

    class Explicit(TypedToolAction[Any]):
        output_type = Label
        tool_name = "label_v2"
        tool_id = "tools.label"

        def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
            return "Label it."

    assert (LabelTicket.output_type, LabelTicket.tool_name, LabelTicket.default_tool_id()) == (
        Label,
        "label_ticket",
        "label_ticket",
    )
    assert (Plain.name, Plain.tool_name, Plain.default_tool_id()) == ("label", "label", "label")
    assert (Explicit.output_type, Explicit.name, Explicit.default_tool_id()) == (
        Label,
        "label_v2",
        "tools.label",
    )
    assert LabelTicket.tool_payload()["description"] == "Label a support ticket."
    assert Plain.tool_payload()["description"] == "How a support ticket is labelled."


async def test_the_arguments_come_back_as_a_validated_instance() -> None:
    model = ScriptedModel([tool_call("label_ticket", {"label": "bug", "confidence": 0.9})])

    value = await LabelTicket().run(arguments={"text": "it crashes"}, context=context_for(model))

    assert value == Label(label="bug", confidence=0.9)
    (request,) = model.requests
    assert request.forced_tool == "label_ticket"
    assert request.tools[0]["parameters"] == LabelTicket.tool_payload()["parameters"]
    assert (
        "x-agentloop" in request.tools[0]
    )  # the store's marker rides along; processors send only the schema


async def test_a_refused_answer_is_sent_back_with_what_was_wrong_and_every_try_is_metered() -> None:
    model = ScriptedModel(
        [
            tool_call("label_ticket", {"label": "question", "confidence": 2}, usage=Usage(input_tokens=10)),
            tool_call("label_ticket", {"label": "feature", "confidence": 0.5}, usage=Usage(input_tokens=7)),
        ]
    )
    meter = InMemoryUsageMeter()

    with use_meter(meter):
        value = await LabelTicket().run(arguments={"text": "add dark mode"}, context=context_for(model))

    assert value == Label(label="feature", confidence=0.5)
    assert meter.usage.input_tokens == 17
    first, second = model.requests
    assert first.history_messages == ()
    call, result = second.history_messages
    assert call == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_label_ticket_1",
                "name": "label_ticket",
                "arguments": json.dumps({"label": "question", "confidence": 2}),
            }
        ],
    }
    assert result["role"] == "tool" and result["tool_call_id"] == "call_label_ticket_1"
    error = json.loads(result["content"])["error"]
    assert error.startswith("invalid arguments: label: Input should be 'bug' or 'feature'; ")
    assert "confidence: Input should be less than or equal to 1" in error
    assert error.endswith("Call label_ticket again with corrected arguments.")


class Fallback(LabelTicket):
    def fallback(self, *, arguments: dict[str, Any], context: Any, reason: str) -> Any:
        return {"fallback": reason}


class NoRetry(Fallback):
    output_retries = 0


class Strict(Fallback):
    on_invalid_output = "fail"


BAD = {"label": "nonsense", "confidence": 0.5}


async def test_once_its_tries_are_spent_a_refused_answer_falls_back_and_the_run_degrades() -> None:
    model = ScriptedModel([tool_call("label_ticket", BAD), tool_call("label_ticket", BAD)])
    events: list[ProgressEvent] = []
    runner = InlineAgentRunner.create(runnable=_stage(Fallback), context=context_for(model, Fallback))

    outcome = await runner.request_outcome(input={"text": "?"}, on_progress=events.append)

    assert outcome.status == "degraded"
    assert outcome.result["fallback"].startswith("invalid arguments: label: Input should be 'bug' or")
    assert outcome.result["fallback"].endswith("(after 2 tries)")
    (failure,) = outcome.failures
    assert failure.action == "label_ticket" and failure.reason == outcome.result["fallback"]
    assert [e.phase for e in events if e.phase in ("model_unavailable", "degraded")] == [
        "model_unavailable",
        "degraded",
    ]
    assert len(model.requests) == 2


async def test_output_retries_zero_asks_once() -> None:
    model = ScriptedModel([tool_call("label_ticket", BAD)])

    value = await NoRetry().run(arguments={}, context=context_for(model, NoRetry))

    assert value["fallback"].startswith("invalid arguments")
    assert len(model.requests) == 1


async def test_on_invalid_output_fail_raises_a_typed_error_naming_the_step() -> None:
    model = ScriptedModel([tool_call("label_ticket", BAD), tool_call("label_ticket", BAD)])
    runner = InlineAgentRunner.create(runnable=_stage(Strict), context=context_for(model, Strict))

    with pytest.raises(InvalidModelOutputError) as raised:
        await runner.request_outcome(input={"text": "?"})

    assert raised.value.failure.action == "label_ticket"
    assert raised.value.failure.reason.endswith("(after 2 tries)")


def test_an_on_invalid_output_that_would_fall_back_quietly_is_refused_at_the_declaration() -> None:
    with pytest.raises(TypeError, match="on_invalid_output must be 'degrade' or 'fail', not 'fallback'"):

        class Quiet(LabelTicket):
            on_invalid_output = "fallback"  # type: ignore[assignment]


async def test_a_model_outage_still_degrades_the_run_as_for_any_forced_tool() -> None:
    model = ScriptedModel([error_reply("HTTP 503")])
    runner = InlineAgentRunner.create(runnable=_stage(Fallback), context=context_for(model, Fallback))

    outcome = await runner.request_outcome(input={"text": "?"})

    assert outcome.status == "degraded" and outcome.result == {"fallback": "model error: HTTP 503"}
    assert len(model.requests) == 1  # an outage is not retried here: the processor has its own retries


class Bounded(BaseModel):
    count: int

    @field_validator("count")
    @classmethod
    def within_the_limit(cls, value: int, info: ValidationInfo) -> int:
        limit = info.context["arguments"]["limit"] if info.context else 10
        if value > limit:
            raise ValueError(f"count must be at most {limit}")
        return value


class CountThings(TypedToolAction[Bounded]):
    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return "Count."

    def normalize(self, *, parsed: Bounded, arguments: dict[str, Any], context: Any) -> Any:
        if parsed.count == 0:
            return None  # rejected, no retry
        if parsed.count % 2:
            raise ValueError("count must be even")  # rejected, sent back
        return parsed.count


@pytest.mark.parametrize(
    ("answers", "expected", "asked"),
    [
        ([{"count": 4}], 4, 1),
        ([{"count": 9}, {"count": 2}], 2, 2),  # the validator reads the step's arguments: over the limit
        ([{"count": 3}, {"count": 2}], 2, 2),  # normalize's ValueError goes back to the model
        ([{"count": 0}], None, 1),  # normalize's None: the fallback at once
    ],
)
async def test_validators_read_the_steps_arguments_and_normalize_adds_business_checks(
    answers: list[dict[str, Any]], expected: Any, asked: int
) -> None:
    model = ScriptedModel([tool_call("bounded", answer) for answer in answers])

    value = await CountThings().run(arguments={"limit": 5}, context=context_for(model, CountThings))

    assert (value, len(model.requests)) == (expected, asked)


async def test_against_the_offline_model_the_step_returns_an_instance() -> None:
    value = await LabelTicket().run(arguments={"text": "x"}, context=context_for(OfflineModel()))

    assert isinstance(value, Label)


async def test_a_row_edited_by_hand_is_what_the_model_is_sent() -> None:
    context = context_for(ScriptedModel([tool_call("label_ticket", {"label": "bug", "confidence": 1})]))
    edited = {**LabelTicket.tool_payload(), "description": "Label it, carefully."}
    context["tool_store"].put("label_ticket", edited)

    await LabelTicket().run(arguments={}, context=context)

    assert context["processor"].requests[0].tools[0]["description"] == "Label it, carefully."


async def test_without_its_row_in_the_tool_store_the_step_sends_its_types_schema() -> None:
    model = ScriptedModel([tool_call("label_ticket", {"label": "bug", "confidence": 1})])

    value = await Fallback().run(
        arguments={}, context={"processor": model, "tool_store": InMemoryToolStore()}
    )

    assert value == Label(label="bug", confidence=1)
    assert model.requests[0].tools == (LabelTicket.tool_payload(),)


def _stage(action: type[TypedToolAction[Any]]) -> type:
    from agentloop import BaseActionStage

    return type(f"{action.__name__}Stage", (BaseActionStage,), {"action": action})

"""``ForcedToolAction``: one forced model tool call, re-validated in code, never raising."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from agentloop.actions import AiResponse, ForcedToolAction, FunctionCall, Usage, embed_user_text
from agentloop.testing import (
    ModelRequest,
    OfflineModel,
    ScriptedModel,
    error_reply,
    text_reply,
    tool_call,
)

TOOL = {
    "name": "classify_ticket",
    "description": "Classify a support ticket.",
    "parameters": {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": ["bug", "feature"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["label", "confidence"],
    },
}


class MemoryToolStore:
    """An in-memory tool store: ``get_payload(tool_id)`` -> JSON text, an object, or ``None``."""

    def __init__(self, payloads: dict[str, Any]) -> None:
        self.payloads = payloads
        self.asked: list[str] = []

    def get_payload(self, tool_id: str) -> Any:
        self.asked.append(tool_id)
        return self.payloads.get(tool_id)


class AsyncMemoryToolStore(MemoryToolStore):
    async def get_payload(self, tool_id: str) -> Any:
        return super().get_payload(tool_id)


class BrokenToolStore:
    def get_payload(self, tool_id: str) -> Any:
        raise ConnectionError("database is down")


class Classify(ForcedToolAction):
    name = "classify"
    description = "Classify a support ticket with the model."
    tool_id_key = "classify_tool_id"

    @property
    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return "Classify the ticket.\n" + embed_user_text("ticket", arguments["text"])

    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        if parsed.get("label") not in ("bug", "feature"):
            return None
        return {"label": parsed["label"], "confidence": float(parsed["confidence"])}

    def fallback(self, *, arguments: dict[str, Any], context: Any, reason: str) -> Any:
        return {"label": "unknown", "reason": reason}


class PlainClassify(Classify):
    """The same action without a declared fallback: failures return ``None``."""

    def fallback(self, *, arguments: dict[str, Any], context: Any, reason: str) -> Any:
        return ForcedToolAction.fallback(self, arguments=arguments, context=context, reason=reason)


ARGUMENTS = {"text": "The app crashes on start."}
INSTRUCTION = "Classify the ticket.\n<ticket><![CDATA[The app crashes on start.]]></ticket>"


def context_with(model: Any, *, store: Any = None, **slots: Any) -> SimpleNamespace:
    store = MemoryToolStore({"t-1": json.dumps(TOOL)}) if store is None else store
    return SimpleNamespace(**{"tool_store": store, "classify_tool_id": "t-1", "processor": model, **slots})


# ----- the whole flow -----------------------------------------------------------------------------


async def test_a_forced_tool_action_returns_the_normalized_tool_arguments(
    scripted_model: ScriptedModel,
) -> None:
    scripted_model.push(tool_call("classify_ticket", {"label": "bug", "confidence": 0.75}))

    value = await Classify().run(arguments=ARGUMENTS, context=context_with(scripted_model))

    assert value == {"label": "bug", "confidence": 0.75}
    assert scripted_model.requests == [
        ModelRequest(
            instruction=INSTRUCTION,
            tools=(TOOL,),
            tool_choices=({"name": "classify_ticket"},),
            history_messages=(),
            documents=(),
            files=(),
            is_auto_handle_function_call=False,
        )
    ]
    scripted_model.assert_consumed()


async def test_the_forced_request_carries_history_documents_and_files_from_the_context(
    scripted_model: ScriptedModel,
) -> None:
    scripted_model.push(tool_call("classify_ticket", {"label": "feature", "confidence": 1}))
    history = [{"role": "user", "content": "earlier"}]
    context = context_with(scripted_model, history_messages=history, documents=["doc"], files=["f.txt"])

    await Classify().run(arguments=ARGUMENTS, context=context)

    (request,) = scripted_model.requests
    assert (request.history_messages, request.documents, request.files) == (
        tuple(history),
        ("doc",),
        ("f.txt",),
    )
    assert (request.tool_names, request.forced_tool) == (["classify_ticket"], "classify_ticket")


@pytest.mark.parametrize(
    "store_cls", [MemoryToolStore, AsyncMemoryToolStore], ids=["sync store", "async store"]
)
@pytest.mark.parametrize(
    "payload", [json.dumps(TOOL), json.dumps(TOOL).encode(), TOOL], ids=["json text", "json bytes", "object"]
)
async def test_the_tool_schema_is_loaded_from_the_store_by_the_id_in_the_context(
    store_cls: type[MemoryToolStore], payload: Any
) -> None:
    store = store_cls({"t-1": payload})

    loaded = await Classify().load_tool_payload(context={"tool_store": store, "classify_tool_id": "t-1"})

    assert loaded == TOOL
    assert store.asked == ["t-1"]


async def test_a_forced_tool_action_works_against_the_offline_model(
    offline_model: OfflineModel, agentloop_contract: Any
) -> None:
    value = await agentloop_contract.check_action(
        Classify(), arguments=ARGUMENTS, context=context_with(offline_model)
    )

    assert value == {"label": "bug", "confidence": 0.0}


def test_extract_function_call_takes_the_first_call_to_the_named_tool() -> None:
    wanted = FunctionCall(name="classify_ticket", arguments="{}", id="2")
    response = AiResponse(
        function_calls=(
            FunctionCall(name="other", arguments="{}", id="1"),
            wanted,
            FunctionCall(name="x", arguments=""),
        )
    )

    assert Classify().extract_function_call(response=response, tool_name="classify_ticket") is wanted
    assert Classify().extract_function_call(response=response, tool_name="missing") is None


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [('{"a": 1}', {"a": 1}), ("{}", {}), ("[1]", None), ('"text"', None), ("{a: 1}", None), ("", None)],
)
def test_parse_function_call_arguments_accepts_only_a_json_object(raw: str, parsed: Any) -> None:
    call = FunctionCall(name="t", arguments=raw)

    assert Classify().parse_function_call_arguments(function_call=call) == parsed


# ----- every failure path returns the fallback ----------------------------------------------------


class RaisingProcessor:
    async def send_request(self, **request: Any) -> AiResponse:
        raise RuntimeError("socket closed")


SCHEMA_MISSING = "tool schema missing or unparsable"

FAILURES: list[tuple[str, dict[str, Any], list[AiResponse], str]] = [
    ("no tool store", {"tool_store": None}, [], SCHEMA_MISSING),
    ("no tool id in the context", {"classify_tool_id": None}, [], SCHEMA_MISSING),
    ("tool id unknown to the store", {"classify_tool_id": "t-404"}, [], SCHEMA_MISSING),
    (
        "store raises",
        {"tool_store": BrokenToolStore()},
        [],
        "tool store failed: ConnectionError: database is down",
    ),
    ("payload is not JSON", {"tool_store": MemoryToolStore({"t-1": "{not json"})}, [], SCHEMA_MISSING),
    (
        "payload bytes are not UTF-8",
        {"tool_store": MemoryToolStore({"t-1": b"\xff\xfe{"})},
        [],
        SCHEMA_MISSING,
    ),
    (
        "payload is not an object",
        {"tool_store": MemoryToolStore({"t-1": '["classify_ticket"]'})},
        [],
        SCHEMA_MISSING,
    ),
    (
        "payload has no tool name",
        {"tool_store": MemoryToolStore({"t-1": '{"parameters": {}}'})},
        [],
        SCHEMA_MISSING,
    ),
    ("no processor", {"processor": None}, [], "model error: context has no processor"),
    ("model error response", {}, [error_reply("rate limited")], "model error: rate limited"),
    ("processor raises", {"processor": RaisingProcessor()}, [], "model error: RuntimeError: socket closed"),
    (
        "plain text instead of a call",
        {},
        [text_reply("It is a bug."), text_reply("A bug.")],  # asked again once (output_retries)
        "model did not call 'classify_ticket' (after 2 tries)",
    ),
    (
        "call to another tool",
        {},
        [tool_call("delete_everything", {"label": "bug", "confidence": 1})] * 2,
        "model did not call 'classify_ticket' (after 2 tries)",
    ),
    (
        "arguments not JSON",
        {},
        [tool_call("classify_ticket", "{label: bug")] * 2,
        "tool arguments are not a JSON object (after 2 tries)",
    ),
    (
        "arguments not an object",
        {},
        [tool_call("classify_ticket", '["bug", 1]')] * 2,
        "tool arguments are not a JSON object (after 2 tries)",
    ),
    (
        "normalize rejects the output",
        {},
        [tool_call("classify_ticket", {"label": "question", "confidence": 1})],
        "model output rejected by normalize",
    ),
    (
        "normalize raises",
        {},
        [tool_call("classify_ticket", {"label": "bug", "confidence": "high"})],
        "normalize raised ValueError: could not convert string to float: 'high'",
    ),
]


@pytest.mark.parametrize(
    ("slots", "script", "reason"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES]
)
async def test_every_failure_path_returns_the_declared_fallback(
    scripted_model: ScriptedModel, slots: dict[str, Any], script: list[AiResponse], reason: str
) -> None:
    scripted_model.push(*script)
    context = context_with(scripted_model, **slots)

    value = await Classify().run(arguments=ARGUMENTS, context=context)

    assert value == {"label": "unknown", "reason": reason}
    scripted_model.assert_consumed()


@pytest.mark.parametrize(("slots", "script"), [f[1:3] for f in FAILURES], ids=[f[0] for f in FAILURES])
async def test_without_a_declared_fallback_every_failure_path_returns_none(
    scripted_model: ScriptedModel, slots: dict[str, Any], script: list[AiResponse]
) -> None:
    scripted_model.push(*script)

    assert (
        await PlainClassify().run(arguments=ARGUMENTS, context=context_with(scripted_model, **slots)) is None
    )


async def test_a_missing_tool_schema_never_reaches_the_model(scripted_model: ScriptedModel) -> None:
    await Classify().run(arguments=ARGUMENTS, context=context_with(scripted_model, classify_tool_id="t-404"))

    assert scripted_model.requests == []


async def test_an_action_expecting_another_tool_than_the_stored_one_falls_back(
    scripted_model: ScriptedModel,
) -> None:
    class ExpectsOtherTool(Classify):
        tool_name = "triage_ticket"

    scripted_model.push(*[tool_call("classify_ticket", {"label": "bug", "confidence": 1})] * 2)

    value = await ExpectsOtherTool().run(arguments=ARGUMENTS, context=context_with(scripted_model))

    assert value == {"label": "unknown", "reason": "model did not call 'triage_ticket' (after 2 tries)"}


async def test_send_forced_tool_request_turns_a_raising_processor_into_an_error_response() -> None:
    response = await Classify().send_forced_tool_request(
        context={"processor": RaisingProcessor()}, instruction="x", tool_payload=TOOL
    )

    assert response == AiResponse.failure("RuntimeError: socket closed")
    assert (response.has_error, response.usage) == (True, Usage())

"""The tool store keeps valid tool schemas by id, and a broken row reads as a missing tool."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from sqlalchemy import Engine, insert

from agentloop.actions import ForcedToolAction
from agentloop.orchestration.store import InMemoryToolStore, SqlToolStore, ToolStore, validate_tool_payload
from agentloop.orchestration.store.tables import ai_tools, utcnow

PLAN = {
    "name": "plan_record_search",
    "description": "Plan a record search.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    },
}


def test_a_stored_payload_reads_back_equal(tool_store: ToolStore) -> None:
    tool_store.put("plan_record_search", PLAN)
    assert tool_store.get_payload("plan_record_search") == PLAN


def test_a_missing_tool_reads_as_none(tool_store: ToolStore) -> None:
    assert tool_store.get_payload("nope") is None


def test_a_payload_may_be_given_as_a_json_string(tool_store: ToolStore) -> None:
    tool_store.put("plan", json.dumps(PLAN))
    assert tool_store.get_payload("plan") == PLAN


def test_parameters_may_name_an_older_json_schema_draft(tool_store: ToolStore) -> None:
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "definitions": {}}
    tool_store.put("old", {"name": "old", "parameters": draft7})
    assert tool_store.get_payload("old") == {"name": "old", "parameters": draft7}


def test_description_is_optional(tool_store: ToolStore) -> None:
    payload = {"name": "finish", "parameters": {"type": "object", "properties": {}}}
    tool_store.put("finish", payload)
    assert tool_store.get_payload("finish") == payload


def test_the_caller_cannot_change_a_stored_payload_afterwards(tool_store: ToolStore) -> None:
    payload = json.loads(json.dumps(PLAN))
    tool_store.put("plan", payload)
    payload["parameters"]["required"].append("limit")
    read = tool_store.get_payload("plan")
    assert read == PLAN
    assert read is not None
    read["name"] = "changed"
    assert tool_store.get_payload("plan") == PLAN


@pytest.mark.parametrize(
    ("payload", "complaint"),
    [
        ("{not json", "not valid JSON"),
        ([PLAN], "must be a JSON object"),
        ({**PLAN, "name": 42}, "'name'"),
        ({**PLAN, "name": ""}, "'name'"),
        ({**PLAN, "name": "has spaces"}, "'name'"),
        ({**PLAN, "name": "x" * 65}, "'name'"),
        ({**PLAN, "description": ["not", "a", "string"]}, "'description' must be a string"),
        ({"name": "p", "description": "d"}, "'parameters'"),
        ({**PLAN, "parameters": {"type": "array"}}, "'parameters'"),
        ({**PLAN, "parameters": "object"}, "'parameters'"),
        (
            {**PLAN, "parameters": {"type": "object", "properties": {"query": {"type": "strng"}}}},
            "'parameters' is not a valid JSON Schema at properties/query/type",
        ),
        ({**PLAN, "parameters": {"type": "object", "required": "query"}}, "at required"),
        ({**PLAN, "extra": {1, 2}}, "builtins.set"),
        ({**PLAN, "extra": float("nan")}, "NaN"),
    ],
)
def test_invalid_payloads_are_refused_with_a_clear_error(
    tool_store: ToolStore, payload: Any, complaint: str
) -> None:
    with pytest.raises(ValueError, match="tool") as raised:
        tool_store.put("bad", payload)
    assert complaint in str(raised.value)
    assert tool_store.get_payload("bad") is None


def test_put_replaces_the_payload_and_keeps_the_creation_time(tool_store: ToolStore) -> None:
    tool_store.put("plan", PLAN)
    (first,) = tool_store.list()
    time.sleep(0.01)
    tool_store.put("plan", {**PLAN, "description": "v2"})
    (second,) = tool_store.list()
    assert second.payload["description"] == "v2"
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    assert second.created_at.tzinfo is not None


def test_list_returns_every_tool_by_id_and_delete_removes_one(tool_store: ToolStore) -> None:
    for tool_id in ("b", "a", "c"):
        tool_store.put(tool_id, {**PLAN, "name": f"tool_{tool_id}"})
    assert [(record.id, record.name) for record in tool_store.list()] == [
        ("a", "tool_a"),
        ("b", "tool_b"),
        ("c", "tool_c"),
    ]
    assert tool_store.delete("b") is True
    assert tool_store.delete("b") is False
    assert [record.id for record in tool_store.list()] == ["a", "c"]
    assert tool_store.get_payload("b") is None


@pytest.mark.parametrize(
    "stored",
    [
        "{this is not json",
        json.dumps({"name": "no_parameters"}),
        {"description": "no name", "parameters": {"type": "object"}},
        ["a", "list"],
    ],
)
def test_an_unparsable_row_written_around_the_store_reads_as_missing(sql_engine: Engine, stored: Any) -> None:
    with sql_engine.begin() as connection:
        connection.execute(
            insert(ai_tools).values(
                id="broken", name="broken", payload=stored, created_at=utcnow(), updated_at=utcnow()
            )
        )
    store = SqlToolStore(sql_engine)
    assert store.get_payload("broken") is None
    assert [record.id for record in store.list()] == ["broken"]


def test_a_row_holding_the_payload_as_a_json_string_still_parses(sql_engine: Engine) -> None:
    with sql_engine.begin() as connection:
        connection.execute(
            insert(ai_tools).values(
                id="text",
                name=PLAN["name"],
                payload=json.dumps(PLAN),
                created_at=utcnow(),
                updated_at=utcnow(),
            )
        )
    assert SqlToolStore(sql_engine).get_payload("text") == PLAN


def test_the_in_memory_store_can_be_seeded() -> None:
    store = InMemoryToolStore({"plan": PLAN})
    assert store.get_payload("plan") == PLAN
    with pytest.raises(ValueError, match="'parameters'"):
        InMemoryToolStore({"bad": {"name": "x"}})


def test_validate_tool_payload_returns_a_plain_copy() -> None:
    result = validate_tool_payload(PLAN)
    assert result == PLAN
    assert result is not PLAN


class _PlanAction(ForcedToolAction):
    name = "plan"
    tool_name = "plan_record_search"
    tool_id_key = "plan_tool_id"

    def build_instruction(self, **_: Any) -> str:
        return "plan"

    def normalize(self, **_: Any) -> Any:
        return None


async def test_a_forced_tool_action_reads_its_schema_through_the_store(tool_store: ToolStore) -> None:
    tool_store.put("plan-v1", PLAN)
    action = _PlanAction.create()
    context = {"tool_store": tool_store, "plan_tool_id": "plan-v1"}
    assert await action.load_tool_payload(context=context) == PLAN
    assert await action.load_tool_payload(context={**context, "plan_tool_id": "missing"}) is None

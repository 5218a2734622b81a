"""``agentloop tools sync``: the typed actions' generated schemas in the ``AiTool`` table; a row
edited by hand wins, with a warning when it has drifted from the generated one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typed_workflows import Label, LabelTicket
from typer.testing import CliRunner

from agentloop import InMemoryToolStore, TypedToolAction, sync_tools
from agentloop.orchestration.cli import app
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import open_store
from agentloop.orchestration.store.tool_sync import MARKER, payload_hash, typed_actions


class Other(BaseModel):
    text: str


def labeller(output: Any, **attributes: Any) -> type[TypedToolAction[Any]]:
    def build_instruction(self: Any, *, arguments: dict[str, Any], context: Any) -> str:
        return "Label."

    namespace = {"output_type": output, "build_instruction": build_instruction, **attributes}
    return type("Labeller", (TypedToolAction,), namespace)


def test_a_new_tool_is_written_with_its_marker_then_left_alone() -> None:
    store = InMemoryToolStore()

    (first,) = sync_tools(store, [LabelTicket])
    (again,) = sync_tools(store, [LabelTicket])

    row = store.get_payload("label_ticket")
    assert (first.status, first.action, again.status) == (
        "created",
        "typed_workflows.LabelTicket",
        "unchanged",
    )
    assert row is not None and {key: row[key] for key in ("name", "description", "parameters")} == (
        LabelTicket.tool_payload()
    )
    assert row[MARKER] == {"generated_from": "typed_workflows.LabelTicket", "sha256": payload_hash(row)}


def test_a_generated_row_follows_its_output_type() -> None:
    store = InMemoryToolStore()
    sync_tools(store, [labeller(Label, name="label")])

    (result,) = sync_tools(store, [labeller(Other, name="label")])

    row = store.get_payload("label")
    assert result.status == "updated"
    assert row is not None and row["parameters"]["properties"] == {"text": {"type": "string"}}


def test_a_row_edited_by_hand_wins_with_a_warning_when_it_drifted(
    watch_logs: Callable[..., pytest.LogCaptureFixture],
) -> None:
    logs = watch_logs("agentloop.orchestration.store.tool_sync")
    store = InMemoryToolStore()
    sync_tools(store, [LabelTicket])
    row = store.get_payload("label_ticket")
    assert row is not None
    store.put("label_ticket", {**row, "description": "Label it, carefully."})  # the marker stays, stale

    (drifted,) = sync_tools(store, [LabelTicket])

    assert drifted.status == "drifted" and "edited by hand" in drifted.detail
    assert store.get_payload("label_ticket")["description"] == "Label it, carefully."  # type: ignore[index]
    assert "tool 'label_ticket' was edited by hand and differs" in logs.text
    (forced,) = sync_tools(store, [LabelTicket], force=True)
    assert forced.status == "updated"
    assert store.get_payload("label_ticket")["description"] == "Label a support ticket."  # type: ignore[index]


def test_a_row_loaded_by_hand_that_matches_is_kept_silently() -> None:
    store = InMemoryToolStore({"label_ticket": LabelTicket.tool_payload()})

    (result,) = sync_tools(store, [LabelTicket])

    assert result.status == "kept"
    assert MARKER not in store.get_payload("label_ticket")  # type: ignore[operator]


def test_two_actions_writing_different_schemas_under_one_id_are_refused() -> None:
    with pytest.raises(ValueError, match="both generate tool 'same' with different schemas"):
        sync_tools(InMemoryToolStore(), [labeller(Label, name="same"), labeller(Other, name="same")])


def test_typed_actions_are_found_in_stages_loops_registries_and_modules() -> None:
    registry = RunnableRegistry.from_modules(["typed_workflows"])

    assert typed_actions(registry) == [LabelTicket]  # through typed.label's stage and typed.triage's loop
    assert typed_actions(RunnableRegistry(), ["typed_workflows"]) == [LabelTicket]  # defined there


def test_the_command_syncs_the_typed_actions_of_agentloop_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = f"sqlite:///{tmp_path / 'tools.sqlite3'}"
    env = {"AGENTLOOP_IMPORTS": "typed_workflows", "DATABASE_URL": database, "COLUMNS": "100"}
    runner = CliRunner()

    created = runner.invoke(app, ["tools", "sync", "--json"], env=env, catch_exceptions=False)
    table = runner.invoke(app, ["tools", "sync"], env=env, catch_exceptions=False)

    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout) == [
        {
            "tool_id": "label_ticket",
            "action": "typed_workflows.LabelTicket",
            "status": "created",
            "detail": "",
        }
    ]
    assert "label_ticket" in table.stdout and "unchanged" in table.stdout
    _, tools = open_store(database)
    row = tools.get_payload("label_ticket")
    tools.put("label_ticket", {**row, "description": "Edited."})  # type: ignore[dict-item]
    strict = runner.invoke(app, ["tools", "sync", "--strict"], env=env, catch_exceptions=False)
    assert strict.exit_code == 1
    assert "drifted" in strict.stdout and "warning:" in strict.stderr
    tools.engine.dispose()

"""A typed step needs no set-up (issue 23): without a row in the tool store it sends its type's
schema; a row still wins, and a row that drifted from the type is logged once per process at first
use and fails ``agentloop tools sync --check``, which lists it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typed_workflows import Label, LabelTicket
from typer.testing import CliRunner

from agentloop import InlineAgentRunner, InMemoryToolStore, OfflineModel, StandardContext
from agentloop.orchestration.cli import app
from agentloop.orchestration.store import open_store
from agentloop.orchestration.store.tool_sync import sync_tools
from agentloop.testing import ScriptedModel, tool_call


class Drifting(LabelTicket):
    """A class of its own, so that what this test logs is not told by another test first."""


async def test_with_no_tool_store_at_all_the_step_asks_with_its_types_schema() -> None:
    model = ScriptedModel([tool_call("label_ticket", {"label": "feature", "confidence": 0.5})])

    value = await LabelTicket().run(arguments={"text": "x"}, context={"processor": model})

    assert value == Label(label="feature", confidence=0.5)
    assert model.requests[0].tools == (LabelTicket.tool_payload(),)


async def test_a_stage_runs_on_an_empty_tool_store_and_succeeds() -> None:
    from agentloop import BaseActionStage

    stage = type("LabelStage", (BaseActionStage,), {"action": LabelTicket})
    context = StandardContext(processor=OfflineModel(), tool_store=InMemoryToolStore())

    outcome = await InlineAgentRunner.create(runnable=stage, context=context).request_outcome(
        input={"text": "The app crashes."}
    )

    assert outcome.status == "succeeded" and set(outcome.result) == {"label", "confidence"}


async def test_a_drifted_row_wins_and_is_logged_once_per_process(
    watch_logs: Callable[..., pytest.LogCaptureFixture],
) -> None:
    logs = watch_logs("agentloop.actions.typed")
    store = InMemoryToolStore({"label_ticket": {**LabelTicket.tool_payload(), "description": "Edited."}})
    answer = tool_call("label_ticket", {"label": "bug", "confidence": 1})
    model = ScriptedModel([answer, answer])

    for _ in range(2):
        await Drifting().run(arguments={}, context={"processor": model, "tool_store": store})

    assert [request.tools[0]["description"] for request in model.requests] == ["Edited.", "Edited."]
    drift = [r.getMessage() for r in logs.records if "differs from the schema" in r.getMessage()]
    assert len(drift) == 1
    assert "'label_ticket'" in drift[0] and "Drifting" in drift[0] and "--check" in drift[0]


async def test_a_row_that_matches_the_type_is_not_drift(
    watch_logs: Callable[..., pytest.LogCaptureFixture],
) -> None:
    logs = watch_logs("agentloop.actions.typed")
    store = InMemoryToolStore()
    sync_tools(store, [LabelTicket])  # the generated row, with its marker
    model = ScriptedModel([tool_call("label_ticket", {"label": "bug", "confidence": 1})])

    await LabelTicket().run(arguments={}, context={"processor": model, "tool_store": store})

    assert "differs" not in logs.text


def test_tools_sync_check_writes_nothing_and_fails_on_drift(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'tools.sqlite3'}"
    env = {"AGENTLOOP_IMPORTS": "typed_workflows", "DATABASE_URL": database, "COLUMNS": "80"}
    runner = CliRunner()

    def check() -> Any:
        return runner.invoke(app, ["tools", "sync", "--check", "--json"], env=env, catch_exceptions=False)

    without_row = check()
    assert without_row.exit_code == 0, without_row.output
    assert [(r["tool_id"], r["status"]) for r in json.loads(without_row.stdout)] == [
        ("label_ticket", "from the type")
    ]
    _, tools = open_store(database)
    try:
        assert tools.get_payload("label_ticket") is None  # --check wrote nothing
        assert runner.invoke(app, ["tools", "sync"], env=env, catch_exceptions=False).exit_code == 0
        assert check().exit_code == 0
        tools.put("label_ticket", {**LabelTicket.tool_payload(), "description": "Edited."})

        drifted = check()

        assert drifted.exit_code == 1
        (row,) = json.loads(drifted.stdout)
        assert (row["tool_id"], row["status"]) == ("label_ticket", "drifted")
        assert row["detail"] == "edited by hand; differs from typed_workflows.LabelTicket's schema"
        assert "label_ticket" in drifted.stderr
        assert tools.get_payload("label_ticket")["description"] == "Edited."  # type: ignore[index]
    finally:
        tools.engine.dispose()


def test_tools_sync_check_cannot_force(tmp_path: Path) -> None:
    env = {"AGENTLOOP_IMPORTS": "typed_workflows", "DATABASE_URL": f"sqlite:///{tmp_path / 't.sqlite3'}"}

    refused = CliRunner().invoke(app, ["tools", "sync", "--check", "--force"], env=env)

    assert refused.exit_code == 2 and "--check writes nothing" in refused.stderr

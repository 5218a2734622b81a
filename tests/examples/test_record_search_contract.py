"""The record-search loop and the demo workflow keep the runnable contract (the kit's checks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from agentloop.examples.record_search import (
    RecordSearchAgentLoop,
    RecordSearchContext,
    RecordSearchDemo,
    RecordSearchResources,
    create_offline_model,
)
from agentloop.examples.record_search.schema import companies_table
from agentloop.testing import ScriptedModel, check_loop, check_runnable, tool_call


async def test_the_loop_passes_check_loop_on_the_offline_model(
    make_context: Callable[..., RecordSearchContext],
) -> None:
    report = await check_loop(
        RecordSearchAgentLoop,
        input={"message": "deals over 100k"},
        context=make_context(create_offline_model()),
    )
    assert report.advance_calls == 1
    assert report.result["found_count"] > 0
    assert report.states[-1]["result"] == report.result
    assert [(e.phase, str(e.status), e.data.get("step_status")) for e in report.events] == [
        ("start", "started", None),
        ("plan", "progress", "started"),
        ("plan", "progress", "completed"),
        ("execute", "progress", "started"),
        ("execute", "progress", "completed"),
        ("compose", "progress", "started"),
        ("compose", "progress", "completed"),
        ("iteration", "progress", None),
        ("done", "completed", None),
    ]
    executed = next(e for e in report.events if e.phase == "execute" and e.data["step_status"] == "completed")
    assert executed.data["found_count"] == report.result["found_count"]


async def test_the_loop_passes_check_loop_on_the_fallback_path(
    make_context: Callable[..., RecordSearchContext],
) -> None:
    report = await check_loop(
        RecordSearchAgentLoop,
        input={"message": "x"},
        context=make_context(ScriptedModel([tool_call("plan_record_search", {"steps": "all"})])),
    )
    assert report.result["records"] == [] and report.advance_calls == 1


@pytest.mark.parametrize("bad", [{"message": 3}, {"message": ["a"]}, 42])
async def test_a_malformed_input_is_a_clear_error(
    bad: Any, make_context: Callable[..., RecordSearchContext]
) -> None:
    loop = RecordSearchAgentLoop.create(context=make_context(create_offline_model()))
    with pytest.raises(ValueError, match=r'\{"message": str\}'):
        await loop.run(input=bad)


def companies_in(resources: RecordSearchResources, country: str) -> int:
    """How many companies of the sample database are in ``country``, asked of the database itself."""
    with resources.service.engine.connect() as connection:
        query = select(func.count()).where(companies_table.c.country == country)
        return int(connection.execute(query).scalar_one())


async def test_the_message_may_come_from_the_context(
    make_context: Callable[..., RecordSearchContext], record_resources: RecordSearchResources
) -> None:
    context = make_context(create_offline_model(), message="companies in Japan")
    result = await RecordSearchAgentLoop.create(context=context).run(input={})
    assert result["found_count"] == companies_in(record_resources, "Japan") > 0
    assert all(record["fields"]["country"] == "Japan" for record in result["records"])


async def test_the_demo_pipeline_passes_check_runnable_in_process(
    make_context: Callable[..., RecordSearchContext], record_resources: RecordSearchResources
) -> None:
    questions = ["companies in Germany", "contacts at Acme", "Tell me a joke"]
    report = await check_runnable(
        RecordSearchDemo, input={"questions": questions}, context=make_context(create_offline_model())
    )
    result = report.result
    assert result["question_count"] == 3 and result["answered_count"] == 3 and result["failed_count"] == 0
    assert [entry["question"] for entry in result["per_question"]] == questions
    found = [entry["found_count"] for entry in result["per_question"]]
    assert found[0] == companies_in(record_resources, "Germany") > 0
    assert found[1] > 0 and found[2] == 0
    assert result["total_found"] == sum(found)
    assert result["summary"].startswith(f"2 of 3 questions found records: {sum(found)} records in all")
    paths = {event.path for event in report.events}
    assert {"", "pipeline/0", "pipeline/0/branch/q1", "pipeline/0/branch/q3", "pipeline/1"} <= paths

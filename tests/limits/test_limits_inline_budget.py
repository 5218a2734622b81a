"""A token budget in-process: ``InlineAgentRunner.request(token_budget=...)`` over a composite."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace
from typing import Any

from workflows.limits import TOOL_ID, ModelFan, StaticToolStore

from agentloop.actions import AiResponse, FunctionCall, InMemoryUsageMeter, Usage, current_meter
from agentloop.loops import InlineAgentRunner, ProgressEvent


class MeteredModel:
    """Answers the forced tool after ``delay`` with 100 tokens; notes the meter each call runs under."""

    def __init__(self, *, delay: float = 0.01) -> None:
        self.delay = delay
        self.calls = 0
        self.meters: set[int] = set()
        self.meter: Any = None

    async def send_request(self, *, tool_choices: Any, **request: Any) -> AiResponse:
        self.calls += 1
        self.meter = current_meter()
        self.meters.add(id(self.meter))
        await asyncio.sleep(self.delay)
        name = tool_choices[0]["name"]
        return AiResponse(
            function_calls=(FunctionCall(name=name, arguments="{}", id=f"c{self.calls}"),),
            usage=Usage(input_tokens=60, output_tokens=40),
        )


async def test_a_budget_spent_mid_way_fails_the_later_branches_and_keeps_the_earlier_results() -> None:
    model = MeteredModel()
    context = SimpleNamespace(processor=model, tool_store=StaticToolStore(), tool_id=TOOL_ID)
    events: list[ProgressEvent] = []
    budget, per_call, concurrency = 650, 100, ModelFan.max_concurrency or 1

    results = await InlineAgentRunner.create(runnable=ModelFan, context=context).request(
        input={"branches": 6, "calls": 3}, token_budget=budget, on_progress=events.append
    )

    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    assert [r["key"] for r in ok] == ["b0", "b1"]  # two at a time: six calls, 600 tokens, then 700 > 650
    assert all(r["output"]["answers"] == 3 for r in ok)
    assert {r["error"]["type"] for r in failed} == {"TokenBudgetExceededError"}
    assert [r["key"] for r in failed] == ["b2", "b3", "b4", "b5"]
    # one meter for the whole run, and it holds every call's usage
    meter = model.meter
    assert len(model.meters) == 1 and isinstance(meter, InMemoryUsageMeter)
    assert meter.budget == budget
    assert meter.usage == Usage(input_tokens=60 * model.calls, output_tokens=40 * model.calls)
    # calls started after the budget was spent: at most the other branch's call already in flight
    assert model.calls <= math.ceil(budget / per_call) + concurrency - 1
    failed_paths = {e.path for e in events if e.status == "failed" and e.phase == "budget_exceeded"}
    assert failed_paths == {f"branch/{key}" for key in ("b2", "b3", "b4", "b5")}


async def test_without_a_budget_every_branch_runs_to_its_end() -> None:
    model = MeteredModel(delay=0)
    context = SimpleNamespace(processor=model, tool_store=StaticToolStore(), tool_id=TOOL_ID)

    results = await InlineAgentRunner.create(runnable=ModelFan, context=context).request(
        input={"branches": 3, "calls": 2}
    )

    assert [r["ok"] for r in results] == [True, True, True]
    assert model.calls == 6
    assert model.meter.usage.total_tokens == 600

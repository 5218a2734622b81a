"""``step``: a plain (async) function is a stage, inline and on Celery, with no second class."""

from __future__ import annotations

from typing import Any

import typed_workflows
from typed_workflows import Shout, exclaim, shout

from agentloop import (
    BaseActionStage,
    BaseCompositeAgent,
    Branch,
    BranchResult,
    InlineAgentRunner,
    ProgressEvent,
    step,
)
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.registry import RunnableRegistry, derived_name


def test_a_step_is_a_stage_class_with_a_stable_derived_name() -> None:
    assert issubclass(shout, BaseActionStage) and issubclass(exclaim, BaseActionStage)
    assert derived_name(shout) == "typed_workflows.shout"
    assert shout.runnable_name == "shout" and shout.action.name == "shout"
    assert shout.__doc__ == "The text in capitals."
    assert step(shout.function) is shout  # the same function is always the same class


def test_the_registry_takes_a_pipelines_steps_under_their_derived_names() -> None:
    registry = RunnableRegistry.from_modules(["typed_workflows"])

    assert registry.name_of(shout) == "typed_workflows.shout"
    assert registry.get("typed_workflows.exclaim").runnable is exclaim


async def test_steps_run_inline_with_the_input_and_the_context_when_they_ask_for_it() -> None:
    events: list[ProgressEvent] = []
    runner = InlineAgentRunner.create(runnable=Shout, context={"mark": "?!"})

    assert await runner.request(input="hello", on_progress=events.append) == "HELLO?!"
    assert [(e.path, e.runnable, e.phase) for e in events] == [
        ("", "Shout", "start"),
        ("pipeline/0", "shout", "start"),
        ("pipeline/0", "shout", "done"),
        ("", "Shout", "stage"),
        ("pipeline/1", "exclaim", "start"),
        ("pipeline/1", "exclaim", "done"),
        ("", "Shout", "stage"),
        ("", "Shout", "done"),
    ]


async def test_a_named_step_is_a_branch_of_a_composite() -> None:
    @step(name="square")
    async def squared(number: int) -> int:
        return number * number

    class Squares(BaseCompositeAgent):
        branch_runnables = (squared,)

        def build_branches(self, *, input: Any) -> list[Branch]:
            return [Branch(runnable=squared, input=n, key=str(n)) for n in input]

        def merge_results(self, *, results: list[BranchResult], input: Any) -> Any:
            return [result.output for result in results]

    assert squared.runnable_name == "square"
    assert await InlineAgentRunner.create(runnable=Squares).request(input=[1, 2, 3]) == [1, 4, 9]


def test_steps_run_on_celery_each_as_its_own_task(typed_celery: Any) -> None:
    app, store = typed_celery
    runner = CeleryAgentRunner.create(runnable=typed_workflows.Shout, app=app, store=store)

    handle = runner.request_sync(input="hi")

    assert handle.wait_sync(timeout=30) == "HI!"
    events = store.events(handle.run_id)
    assert {event["runnable"] for _, event in events} >= {"shout", "exclaim"}

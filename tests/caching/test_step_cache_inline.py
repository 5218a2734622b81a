"""Step caching in-process: a cached step's result is reused by the runner's later runs, counted
and reported; it expires, changes key with its tool schema, and a failure is never kept."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from workflows.caching import Label, LabelStage, LabelTicket

from agentloop.actions import BaseAgentAction, InMemoryStepCache, Usage
from agentloop.loops import InlineAgentRunner
from agentloop.loops.progress import ProgressEvent
from agentloop.orchestration.runtime.context import StandardContext
from agentloop.orchestration.store import InMemoryToolStore
from agentloop.pipelines import BaseActionStage
from agentloop.testing import ScriptedModel, error_reply, tool_call

TICKET = {"text": "The app crashes on start."}


def answer(label: str = "bug", tokens: int = 30) -> Any:
    return tool_call(
        "label_ticket",
        {"label": label, "confidence": 0.9},
        usage=Usage(input_tokens=tokens - 5, output_tokens=5),
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def context(model: ScriptedModel, tools: InMemoryToolStore | None = None) -> StandardContext:
    tools = tools or InMemoryToolStore({"label_ticket": LabelTicket.tool_payload()})
    return StandardContext(processor=model, tool_store=tools)


def cache_events(events: list[ProgressEvent]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.phase, dict(e.data)) for e in events if e.phase in ("cache_hit", "cache_miss")]


async def test_the_second_run_on_a_runner_takes_the_cached_result_without_calling_the_model() -> None:
    model = ScriptedModel([answer(tokens=30)])
    runner = InlineAgentRunner.create(runnable=LabelStage, context=context(model))
    events: list[ProgressEvent] = []

    first = await runner.request_outcome(input=TICKET, on_progress=events.append)
    second = await runner.request_outcome(input=TICKET, on_progress=events.append)

    assert first.result == second.result == {"label": "bug", "confidence": 0.9}
    assert len(model.requests) == 1
    (miss, miss_data), (hit, hit_data) = cache_events(events)
    assert (miss, hit) == ("cache_miss", "cache_hit")
    assert miss_data["action"] == hit_data["action"] == "label_ticket"
    assert miss_data["key"] == hit_data["key"] and len(hit_data["key"]) == 12
    assert hit_data["tokens_saved"] == 30
    assert (first.cache.hits, first.cache.misses, first.cache.tokens_saved) == (0, 1, 0)
    assert (second.cache.hits, second.cache.misses, second.cache.tokens_saved) == (1, 0, 30)
    assert [e.path for e in events if e.phase == "cache_hit"] == [""]


async def test_a_hit_returns_the_typed_output_as_an_instance() -> None:
    model = ScriptedModel([answer()])
    ctx, cache = context(model), InMemoryStepCache()
    action = LabelTicket()
    runner = InlineAgentRunner.create(runnable=LabelStage, context=ctx, cache=cache)
    await runner.request(input=TICKET)
    from agentloop.actions.caching import use_step_cache

    with use_step_cache(cache):
        value = await action.run(arguments=TICKET, context=ctx)
    assert value == Label(label="bug", confidence=0.9)
    assert len(model.requests) == 1


async def test_a_result_expires_after_its_ttl() -> None:
    clock = Clock()
    model = ScriptedModel([answer("bug"), answer("feature")])
    runner = InlineAgentRunner.create(
        runnable=LabelStage, context=context(model), cache=InMemoryStepCache(clock=clock)
    )

    assert (await runner.request(input=TICKET))["label"] == "bug"
    clock.now += 59
    assert (await runner.request(input=TICKET))["label"] == "bug"
    clock.now += 2  # 61 s after it was kept: LabelTicket.cache_ttl is 60
    outcome = await runner.request_outcome(input=TICKET)

    assert outcome.result["label"] == "feature"
    assert outcome.cache.misses == 1 and len(model.requests) == 2


async def test_a_changed_tool_schema_is_a_new_key() -> None:
    tools = InMemoryToolStore({"label_ticket": LabelTicket.tool_payload()})
    model = ScriptedModel([answer("bug"), answer("feature")])
    runner = InlineAgentRunner.create(runnable=LabelStage, context=context(model, tools))
    events: list[ProgressEvent] = []
    await runner.request(input=TICKET, on_progress=events.append)

    tools.put("label_ticket", {**LabelTicket.tool_payload(), "description": "Label a ticket, version 2."})
    assert (await runner.request(input=TICKET, on_progress=events.append))["label"] == "feature"

    (_, first), (_, second) = cache_events(events)
    assert first["key"] != second["key"] and len(model.requests) == 2


async def test_other_arguments_are_another_key() -> None:
    model = ScriptedModel([answer("bug"), answer("feature")])
    runner = InlineAgentRunner.create(runnable=LabelStage, context=context(model))
    await runner.request(input=TICKET)
    assert (await runner.request(input={"text": "Add dark mode."}))["label"] == "feature"


@pytest.mark.parametrize(
    "failure",
    [
        error_reply("model down"),  # a degraded model call
        tool_call("something_else", {}),  # the forced call not made
        tool_call("label_ticket", {"label": "bug"}),  # rejected twice (the retry too): the fallback
    ],
)
async def test_a_failure_is_never_cached(failure: Any) -> None:
    retry = [failure] if failure.function_calls and failure.function_calls[0].name == "label_ticket" else []
    model = ScriptedModel([failure, *retry, answer("bug")])
    runner = InlineAgentRunner.create(runnable=LabelStage, context=context(model))

    await runner.request_outcome(input=TICKET)
    outcome = await runner.request_outcome(input=TICKET)
    assert outcome.result == {"label": "bug", "confidence": 0.9} and outcome.status == "succeeded"
    third = await runner.request_outcome(input=TICKET)

    assert third.cache.hits == 1 and third.result == outcome.result
    model.assert_consumed()


class Flaky(BaseAgentAction):
    name = "flaky"
    cache_ttl = 60
    calls: ClassVar[int] = 0

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        type(self).calls += 1
        if type(self).calls == 1:
            raise RuntimeError("boom")
        return {"n": type(self).calls}


class FlakyStage(BaseActionStage):
    action = Flaky


async def test_an_exception_is_never_cached() -> None:
    runner = InlineAgentRunner.create(runnable=FlakyStage)
    with pytest.raises(RuntimeError, match="boom"):
        await runner.request(input={})
    assert await runner.request(input={}) == {"n": 2}
    assert await runner.request(input={}) == {"n": 2}
    assert Flaky.calls == 2


class NotJson(BaseAgentAction):
    name = "not_json"
    cache_ttl = 60
    calls: ClassVar[int] = 0

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        type(self).calls += 1
        return {1, 2}


class Uncached(NotJson):
    name = "uncached"
    cache_ttl = None
    calls: ClassVar[int] = 0


async def test_a_value_that_is_not_json_is_not_cached_and_an_action_without_a_ttl_never_is() -> None:
    cache = InMemoryStepCache()
    events: list[ProgressEvent] = []
    for action in (NotJson, Uncached):
        stage = type(f"{action.__name__}Stage", (BaseActionStage,), {"action": action})
        runner = InlineAgentRunner.create(runnable=stage, cache=cache)
        for _ in range(2):
            await runner.request(input={}, on_progress=events.append)
    assert (NotJson.calls, Uncached.calls, len(cache)) == (2, 2, 0)
    assert [phase for phase, _ in cache_events(events)] == ["cache_miss", "cache_miss"]


class BrokenCache:
    def get(self, key: str) -> str | None:
        raise ConnectionError("cache down")

    async def set(self, key: str, value: str, *, ttl: float) -> None:
        raise ConnectionError("cache down")


async def test_a_broken_cache_is_a_miss_not_a_failure() -> None:
    model = ScriptedModel([answer(), answer()])
    runner = InlineAgentRunner.create(runnable=LabelStage, context=context(model), cache=BrokenCache())
    first = await runner.request_outcome(input=TICKET)
    second = await runner.request_outcome(input=TICKET)
    assert first.result == second.result and second.cache.misses == 1 and len(model.requests) == 2


class Base(BaseAgentAction):
    name = "base"
    cache_ttl = 60
    runs: ClassVar[list[str]] = []

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        type(self).runs.append("base")
        return 1


class Derived(Base):
    name = "derived"

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        return await super().run(arguments=arguments, context=context) + 1


async def test_a_subclass_calling_super_run_is_cached_once_under_its_own_key() -> None:
    events: list[ProgressEvent] = []
    stage = type("DerivedStage", (BaseActionStage,), {"action": Derived})
    runner = InlineAgentRunner.create(runnable=stage)
    assert await runner.request(input={}, on_progress=events.append) == 2
    assert await runner.request(input={}, on_progress=events.append) == 2
    assert [(p, d["action"]) for p, d in cache_events(events)] == [
        ("cache_miss", "derived"),
        ("cache_hit", "derived"),
    ]
    assert Base.runs == ["base"]


def test_the_in_memory_cache_keeps_at_most_max_entries() -> None:
    cache = InMemoryStepCache(max_entries=2)
    for key in "abc":
        cache.set(key, key, ttl=10)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (None, "b", "c", 2)


class KeyedByText(BaseAgentAction):
    name = "keyed_by_text"
    cache_ttl = 60
    calls: ClassVar[int] = 0

    def cache_key(self, *, arguments: dict[str, Any], context: Any) -> str | None:  # type: ignore[override]
        if arguments.get("text") == "explode":
            raise RuntimeError("no key")
        return None if arguments.get("text") == "skip" else f"text:{arguments.get('text', '').lower()}"

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        type(self).calls += 1
        return type(self).calls


async def test_an_overridden_cache_key_decides_and_one_that_fails_runs_uncached() -> None:
    stage = type("KeyedStage", (BaseActionStage,), {"action": KeyedByText})
    runner = InlineAgentRunner.create(runnable=stage)
    answers = [
        await runner.request(input={"text": text})
        for text in ("Hi", "HI", "skip", "skip", "explode", "explode")
    ]
    assert answers == [1, 1, 2, 3, 4, 5]

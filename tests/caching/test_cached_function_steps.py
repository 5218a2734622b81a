"""A ``@step`` function opts into the step cache with ``cache_ttl``: the runner's later runs with
the same input reuse its result without calling it, another input or ``cache_version`` is a new
key, and without ``cache_ttl`` a step is never cached."""

from __future__ import annotations

from typing import Any

from agentloop.loops import InlineAgentRunner
from agentloop.pipelines import step

calls: list[str] = []


@step(cache_ttl=60)
def shout(text: str) -> str:
    calls.append(text)
    return text.upper()


@step(name="shout_v2", cache_ttl=60, cache_version="2")
def shout_again(text: str) -> str:
    calls.append(f"v2:{text}")
    return text.upper() + "!"


@step
def plain(text: str) -> str:
    calls.append(f"plain:{text}")
    return text


async def test_a_cached_function_step_runs_once_per_input() -> None:
    calls.clear()
    runner = InlineAgentRunner.create(runnable=shout, context={})
    phases: list[str] = []

    def heard(event: Any) -> None:
        phases.append(event.phase)

    assert await runner.request(input="hi", on_progress=heard) == "HI"
    assert await runner.request(input="hi", on_progress=heard) == "HI"
    assert await runner.request(input="ho", on_progress=heard) == "HO"

    assert calls == ["hi", "ho"]
    assert [p for p in phases if p.startswith("cache_")] == ["cache_miss", "cache_hit", "cache_miss"]


async def test_the_cache_version_and_name_are_part_of_the_key() -> None:
    calls.clear()
    runner = InlineAgentRunner.create(runnable=shout_again, context={})

    assert await runner.request(input="hi") == "HI!"
    assert await runner.request(input="hi") == "HI!"
    assert shout_again.action.cache_version == "2"
    assert calls == ["v2:hi"]


async def test_a_step_without_cache_ttl_always_runs() -> None:
    calls.clear()
    runner = InlineAgentRunner.create(runnable=plain, context={})

    await runner.request(input="x")
    await runner.request(input="x")

    assert calls == ["plain:x", "plain:x"]

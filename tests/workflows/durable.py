"""Workflows of the durability tests (imported by worker processes too)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from pydantic import BaseModel

from agentloop.actions import Usage, check_budget, report_usage
from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.registry import register
from agentloop.pipelines import BaseAgentPipeline, BaseCompositeAgent, Branch


class SlowCount(BaseAgentLoop):
    """Counts to ``input`` slowly; every iteration appends one line to the file named in
    the context, so a test can see which iterations ran (and in which process)."""

    max_iterations = 50

    def create_initial_state(self, *, input: Any) -> Any:
        return {"goal": input, "n": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        time.sleep(float(self.context.get("step_seconds", 0.25)))
        log = self.context.get("log")
        if log:
            with open(log, "a") as handle:
                handle.write(f"{iteration} {os.getpid()}\n")
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["goal"])

    def build_result(self, *, state: Any) -> Any:
        return {"counted": state["n"]}


class SwallowsItsTimeLimit(SlowCount):
    """Never ends: its step waits in a loop that swallows whatever is raised meanwhile, as a broad
    ``except Exception`` does to Celery's ``SoftTimeLimitExceeded``; only the hard limit stops it."""

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        while True:
            try:
                time.sleep(0.05)
            except Exception:  # the soft time limit among them
                continue


class Metered(SlowCount):
    """Reports 10 input and 2 output tokens per iteration, as a model step would; iteration
    ``fail_at`` (context) fails after its call."""

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        check_budget()
        report_usage(Usage(input_tokens=10, output_tokens=2))
        if iteration == self.context.get("fail_at"):
            raise RuntimeError(f"iteration {iteration} failed after its model call")
        return {**state, "n": state["n"] + 1}


class NotJsonState(SlowCount):
    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1, "seen": {1, 2}}


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _touch(path: str) -> None:
    with open(path, "w"):
        pass


class WaitsForTheTest(SlowCount):
    """One step that waits for the file ``go`` (context) to exist, once it has written the file
    ``ready``: by then its progress has been shown (the task's state timer fires at 0.5 s), so the
    step ends, and its stage with it, without another message to send until the next stage's."""

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await asyncio.sleep(1.0)
        _touch(self.context["ready"])
        while not _exists(self.context["go"]):  # noqa: ASYNC110 - a file the test process writes
            await asyncio.sleep(0.02)
        return {**state, "n": state["n"] + 1}


class WaitsThenCounts(BaseAgentPipeline):
    """:class:`WaitsForTheTest`, then a count to ``input``."""

    stages = (WaitsForTheTest, SlowCount)

    def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
        return 1 if index == 0 else input


register("durable.waits_then_counts", WaitsThenCounts)


class KeyedCount(SlowCount):
    """Counts to ``input["goal"]``; every iteration appends ``<key> <iteration> <pid>`` to the
    file named in the context, so a test can see which branch ran which iteration."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"key": input["key"], "goal": input["goal"], "n": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        with open(self.context["log"], "a") as handle:
            handle.write(f"{state['key']} {iteration} {os.getpid()}\n")
        return {**state, "n": state["n"] + 1}


class WaitsThenFans(BaseCompositeAgent):
    """Writes the file ``ready`` (context) as it builds its branches, and waits for the file ``go``
    before it returns them: ``input["width"]`` :class:`KeyedCount` branches of ``input["goal"]``,
    one task each (the chord its task replaces itself with, once ``go`` exists)."""

    max_concurrency = None
    pack_size = 1
    branch_runnables = (KeyedCount,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        _touch(self.context["ready"])
        while not _exists(self.context["go"]):
            time.sleep(0.02)
        return [
            Branch(runnable=KeyedCount, input={"key": str(i), "goal": input["goal"]}, key=str(i))
            for i in range(input["width"])
        ]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


register("durable.keyed_count", KeyedCount)
register("durable.waits_then_fans", WaitsThenFans)


class CountState(BaseModel):
    goal: int
    n: int = 0


class TypedSlowCount(SlowCount):
    """:class:`SlowCount` with its state declared as a pydantic model: its hooks refuse anything else."""

    state_type = CountState

    def create_initial_state(self, *, input: Any) -> Any:
        return CountState(goal=input)

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        assert isinstance(state, CountState), type(state)
        counted = super().advance_state(state=state.model_dump(), iteration=iteration)
        return CountState.model_validate(counted)

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        assert isinstance(state, CountState), type(state)
        return state.n >= state.goal

    def build_result(self, *, state: Any) -> Any:
        assert isinstance(state, CountState), type(state)
        return {"counted": state.n}


class KillsItsProcess(SlowCount):
    """Kills the process it runs in at its first iteration, on every delivery (a poison message no
    check can see: a segfaulting library, an OOM): only a delivery limit stops it."""

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)
        return state


class TalliedCount(BaseAgentLoop):
    """Counts to ``input["goal"]``; every iteration appends ``<input["id"]> <iteration> <pid>`` to the
    file named by the context's ``log``, so a test sees which iteration of which run ran twice."""

    max_iterations = 50

    def create_initial_state(self, *, input: Any) -> Any:
        return {"id": input["id"], "goal": input["goal"], "n": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        time.sleep(float(self.context.get("step_seconds", 0.0)))
        with open(self.context["log"], "a") as handle:
            handle.write(f"{state['id']} {iteration} {os.getpid()}\n")
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["goal"])

    def build_result(self, *, state: Any) -> Any:
        return {"id": state["id"], "counted": state["n"]}


register("durable.kills_its_process", KillsItsProcess)
register("durable.tallied", TalliedCount)
register("durable.slow_count", SlowCount)
register("durable.typed_slow_count", TypedSlowCount)
register("durable.not_json_state", NotJsonState)
register("durable.metered", Metered)
register("durable.swallows_its_time_limit", SwallowsItsTimeLimit)

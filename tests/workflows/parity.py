"""Workflows of the parity suite, registered by name for the inline and Celery runs.

Imported by the test process and, through ``AGENTLOOP_IMPORTS``, by real
worker processes, so both register the same names.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from agentloop.actions import (
    AgentActionRegistry,
    AiResponse,
    ForcedToolAction,
    FunctionCall,
    ModelFailurePolicy,
)
from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.registry import register
from agentloop.orchestration.runtime.context import standard_context as _standard_context
from agentloop.pipelines import BaseAgentPipeline, BaseCompositeAgent, Branch, BranchResult, FailurePolicy
from agentloop.pipelines.action_stage import step


class CountTo(BaseAgentLoop):
    """Counts from the input up to ``input + 3``."""

    max_iterations = 10

    def create_initial_state(self, *, input: Any) -> Any:
        return {"start": input, "n": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["start"] + 3)

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


class Bounded(CountTo):
    """Never completes on its own: the bound of 3 ends it."""

    max_iterations = 3

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return False

    def build_bounded_result(self, *, state: Any) -> Any:
        return {"bound_hit": True, "best": state["n"]}


class Explode(CountTo):
    """Fails in its second iteration."""

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        if iteration == 1:
            raise ValueError(f"exploded at {state['n']}")
        return {**state, "n": state["n"] + 1}


class Slow(CountTo):
    """A long loop that sleeps between steps, to be cancelled."""

    max_iterations = 400

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        time.sleep(0.02)
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return False


class ThreeStages(BaseAgentPipeline):
    stages = (CountTo, CountTo, CountTo)

    def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
        return previous_output * 2 if index == 2 else previous_output


class Fan(BaseCompositeAgent):
    """One CountTo per item of the input list; sums the results."""

    branch_runnables = (CountTo,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=CountTo, input=value, key=str(i)) for i, value in enumerate(input)]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return {"total": sum(r.output for r in results), "keys": [r.key for r in results]}


class Widths(CountTo):
    """A first stage whose output decides the next stage's width: ``[0, 1, ..., n-1]``."""

    def build_result(self, *, state: Any) -> Any:
        return list(range(state["n"] - state["start"] + state["start"] % 5))


class FanAfterStage(BaseAgentPipeline):
    stages = (Widths, Fan)


class PipelineBranch(BaseAgentPipeline):
    stages = (CountTo, CountTo)


class FanOfPipelines(BaseCompositeAgent):
    branch_runnables = (PipelineBranch,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=PipelineBranch, input=i * 10, key=f"p{i}") for i in range(input)]


class MixedFan(BaseCompositeAgent):
    """Branch ``bad`` fails; the others succeed."""

    branch_runnables = (CountTo, Explode, PipelineBranch)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=CountTo, input=1, key="good"),
            Branch(runnable=Explode, input=2, key="bad"),
            Branch(runnable=PipelineBranch, input=3, key="nested"),
        ]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [r.to_dict() for r in results]


class CollectingFan(MixedFan):
    failure_policy = FailurePolicy.COLLECT


class FailFastFan(MixedFan):
    failure_policy = FailurePolicy.FAIL_FAST


class PipelineOverFailFast(BaseAgentPipeline):
    stages = (CountTo, FailFastFan)


class SlowFan(BaseCompositeAgent):
    branch_runnables = (Slow,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Slow, input=i, key=str(i)) for i in range(input)]


def merged_outputs(results: list[BranchResult]) -> list[Any]:
    return [r.output for r in results]


WORKFLOWS: dict[str, type] = {
    "parity.count": CountTo,
    "parity.bounded": Bounded,
    "parity.three_stages": ThreeStages,
    "parity.fan": Fan,
    "parity.fan_after_stage": FanAfterStage,
    "parity.fan_of_pipelines": FanOfPipelines,
    "parity.collecting_fan": CollectingFan,
    "parity.fail_fast_fan": FailFastFan,
    "parity.pipeline_over_fail_fast": PipelineOverFailFast,
    "parity.slow_fan": SlowFan,
}

for _name, _cls in WORKFLOWS.items():
    register(_name, _cls)


class SlowShort(Slow):
    max_iterations = 10

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["start"] + 6)


class SlowFanShort(BaseCompositeAgent):
    failure_policy = FailurePolicy.COLLECT
    branch_runnables = (SlowShort,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=SlowShort, input=i, key=str(i)) for i in range(input)]


register("parity.slow_fan_short", SlowFanShort)


# ----- bounded concurrency and the whole-run deadline --------------------------------------------


class Nap(BaseAgentLoop):
    """Two naps of 0.25 s that yield to the event loop (so in-process branches overlap)."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"n": input, "naps": 0}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await asyncio.sleep(0.25)
        return {**state, "naps": state["naps"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["naps"] >= 2)

    def build_result(self, *, state: Any) -> Any:
        return state["n"] * 10


class BoundedFan(BaseCompositeAgent):
    """``input`` naps, at most two at once; the outputs in branch order."""

    max_concurrency = 2
    branch_runnables = (Nap,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Nap, input=i, key=str(i)) for i in range(input)]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [r.output for r in results]


class OneLaneFan(BoundedFan):
    max_concurrency = 1


class BoundedFanOfPipelines(BaseCompositeAgent):
    """Pipelines (which expand into canvases of their own) in two lanes; failures collected."""

    max_concurrency = 2
    failure_policy = FailurePolicy.COLLECT
    branch_runnables = (PipelineBranch, Explode)

    def build_branches(self, *, input: Any) -> list[Branch]:
        branches = [Branch(runnable=PipelineBranch, input=i * 10, key=f"p{i}") for i in range(input)]
        return [*branches, Branch(runnable=Explode, input=1, key="bad")]


class Crawl(CountTo):
    """A long loop whose steps await (the deadline can cut one off mid-step)."""

    max_iterations = 400

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await asyncio.sleep(0.05)
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return False


class CrawlAfterCount(BaseAgentPipeline):
    stages = (CountTo, Crawl)


class CrawlFan(BaseCompositeAgent):
    """``input`` crawls side by side."""

    branch_runnables = (Crawl,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Crawl, input=i, key=str(i)) for i in range(input)]


class CollectingCrawlFan(CrawlFan):
    """Collects failing branches, but never a deadline: that stops the whole run."""

    failure_policy = FailurePolicy.COLLECT


register("parity.crawl_fan", CrawlFan)
register("parity.collecting_crawl_fan", CollectingCrawlFan)
register("parity.bounded_fan", BoundedFan)
register("parity.one_lane_fan", OneLaneFan)
register("parity.bounded_fan_of_pipelines", BoundedFanOfPipelines)
register("parity.crawl_after_count", CrawlAfterCount)


# ----- model outages: degraded runs -----------------------------------------------------------------

ANSWER_TOOL = {
    "name": "answer",
    "description": "Answer the question.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}


class FlakyModel:
    """Answers every question, except those marked ``[down]``: their calls fail after the retries."""

    model_name = "flaky"

    async def send_request(self, *, instruction: str, **request: Any) -> AiResponse:
        if "[down]" in instruction:
            return AiResponse.failure("openai: 503 server error after 4 attempts: upstream unavailable")
        arguments = json.dumps({"text": instruction.removeprefix("Answer: ")})
        return AiResponse(function_calls=(FunctionCall(name="answer", arguments=arguments),))


class AnswerTools:
    def get_payload(self, tool_id: str) -> Any:
        return ANSWER_TOOL if tool_id == "answer" else None


def model_context(spec: Mapping[str, Any]) -> Any:
    """What the model workflows read from their context, built in whichever process runs them."""
    return SimpleNamespace(processor=FlakyModel(), tool_store=AnswerTools(), answer_tool_id="answer")


class Answer(ForcedToolAction):
    name = "answer"
    tool_id_key = "answer_tool_id"

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return f"Answer: {arguments['question']}"

    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        return {"text": parsed["text"]} if isinstance(parsed.get("text"), str) else None

    def fallback(self, *, arguments: dict[str, Any], context: Any, reason: str) -> Any:
        return {"text": "the model is unavailable"}


class StrictAnswer(Answer):
    on_model_failure = ModelFailurePolicy.FAIL


class Ask(BaseAgentLoop):
    """One question, one forced tool call."""

    max_iterations = 1
    action: type[Answer] = Answer

    @property
    def registry(self) -> AgentActionRegistry:
        return AgentActionRegistry.create(actions=[self.action.create()])

    def create_initial_state(self, *, input: Any) -> Any:
        return {"question": input, "answer": None}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        answer = await self.perform_action(name="answer", arguments={"question": state["question"]})
        return {**state, "answer": answer}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["answer"] is not None

    def build_result(self, *, state: Any) -> Any:
        return state["answer"]


class StrictAsk(Ask):
    action = StrictAnswer


class AskAll(BaseCompositeAgent):
    """One :class:`Ask` per question; the answers in order."""

    branch_runnables = (Ask,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Ask, input=question, key=f"q{i}") for i, question in enumerate(input)]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [r.output["text"] for r in results]


register("parity.ask", Ask, context_factory=model_context)
register("parity.strict_ask", StrictAsk, context_factory=model_context)
register("parity.ask_all", AskAll, context_factory=model_context)


# ----- packed branches: several loops to one task (docs/how-to/packing.md) -------------------------


class PackedFan(Fan):
    """:class:`Fan` with its loops packed 4 to a task, under the default bound of 8: two lanes."""

    pack_size = 4


class PackedWideFan(Fan):
    """:class:`Fan` packed 4 to a task, unbounded: a chord of packs."""

    pack_size = 4
    max_concurrency = None


class PackedCollectingFan(CollectingFan):
    """A loop, a failing loop (packed together) and a pipeline (its own canvas); failures collected."""

    pack_size = 3


class PackedFailFastFan(FailFastFan):
    pack_size = 3


class PackedCrawlFan(CrawlFan):
    """Crawls packed 8 to a task, all at once: the deadline and a cancel must reach each."""

    pack_size = 8
    max_concurrency = None


register("parity.packed_fan", PackedFan)
register("parity.packed_wide_fan", PackedWideFan)
register("parity.packed_collecting_fan", PackedCollectingFan)
register("parity.packed_fail_fast_fan", PackedFailFastFan)
register("parity.packed_crawl_fan", PackedCrawlFan)


def _append(path: str, line: str) -> None:
    with open(path, "a") as handle:
        handle.write(line)


class LoggedCount(BaseAgentLoop):
    """Counts to ``input`` in awaited steps of ``step_seconds`` (context); each step appends
    ``iteration pid goal`` to the context's ``log``, so a test sees which ran, and where."""

    max_iterations = 50

    def create_initial_state(self, *, input: Any) -> Any:
        return {"goal": input, "n": 0}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await asyncio.sleep(float(self.context.get("step_seconds", 0.25)))
        _append(self.context["log"], f"{iteration} {os.getpid()} {state['goal']}\n")
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["goal"])

    def build_result(self, *, state: Any) -> Any:
        return {"counted": state["n"]}


class PackedCounts(BaseCompositeAgent):
    """One :class:`LoggedCount` per goal of the input list, all in one pack."""

    pack_size = 16
    max_concurrency = None
    branch_runnables = (LoggedCount,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=LoggedCount, input=goal, key=str(goal)) for goal in input]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


register("parity.packed_counts", PackedCounts)


# ----- runs of stages in one agentloop.stages task (docs/how-to/packing.md#pipelines) -----


class FailingMidway(BaseAgentPipeline):
    """Loop stages that share an ``agentloop.stages`` task; the third fails."""

    stages = (CountTo, CountTo, Explode, CountTo)


class CollectedFailingStages(BaseCompositeAgent):
    """Two pipelines of stages under ``collect``: one fails mid-run, the other ends."""

    failure_policy = FailurePolicy.COLLECT
    branch_runnables = (FailingMidway, PipelineBranch)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=FailingMidway, input=1, key="failing"),
            Branch(runnable=PipelineBranch, input=2, key="ending"),
        ]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [r.to_dict() for r in results]


class OneStagePerTask(ThreeStages):
    """:class:`ThreeStages` with ``pack_size = 1``: an ``agentloop.stage`` task each."""

    pack_size = 1


class LoggedStage(BaseAgentLoop):
    """One awaited step of ``step_seconds`` (context); appends ``input pid`` to the context's
    ``log`` once the step is done; its output is its input plus one."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"n": input, "done": False}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await asyncio.sleep(float(self.context.get("step_seconds", 0.1)))
        _append(self.context["log"], f"{state['n']} {os.getpid()}\n")
        return {**state, "n": state["n"] + 1, "done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


class LoggedStages(BaseAgentPipeline):
    """Eight :class:`LoggedStage` stages: run together in one ``agentloop.stages`` task."""

    stages = (LoggedStage,) * 8


register("parity.failing_midway", FailingMidway)
register("parity.collected_failing_stages", CollectedFailingStages)
register("parity.one_stage_per_task", OneStagePerTask)
register("parity.logged_stages", LoggedStages)


# ----- packed model calls: the faults suite's packed scenarios (tests/faults/pack_scenarios.py) -----


class TaggedModelCalls(BaseAgentLoop):
    """``input["calls"]`` model calls, one per iteration, each asking ``[packed:<tag>:<iteration>]``
    of the context's processor, so the model server can count the calls of each iteration."""

    max_iterations = 50

    def create_initial_state(self, *, input: Any) -> Any:
        return {"tag": input["tag"], "calls": input["calls"], "n": 0}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        from agentloop.actions.model import ModelRequest

        request = ModelRequest(instruction=f"[packed:{state['tag']}:{iteration}]")
        response = await request.send(self.context.processor)
        if response.error is not None:
            raise RuntimeError(f"the model call failed: {response.error}")
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["calls"])

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


class PackedModelCalls(BaseCompositeAgent):
    """``input["width"]`` :class:`TaggedModelCalls` branches packed 8 to a task, all at once; the
    result is how many calls each made, in order."""

    pack_size = 8
    max_concurrency = None
    branch_runnables = (TaggedModelCalls,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(
                runnable=TaggedModelCalls,
                input={"tag": f"{input['tag']}/{i}", "calls": input["calls"]},
                key=str(i),
            )
            for i in range(input["width"])
        ]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


register("parity.tagged_model_calls", TaggedModelCalls, context_factory=_standard_context)
register("parity.packed_model_calls", PackedModelCalls)


# ----- plain-function work in a pack (packing/threads.py): tests/integration/test_packed_plain_work.py -----

#: Per token (a test's input), the events its branches meet at, in the worker process.
_MEETINGS: dict[str, dict[str, threading.Event]] = {}
_MEETINGS_LOCK = threading.Lock()
#: How long a plain step waits for its sibling before it gives up (the test then fails).
MEETING_SECONDS = 20.0


def _meeting(token: str) -> dict[str, threading.Event]:
    with _MEETINGS_LOCK:
        return _MEETINGS.setdefault(token, {name: threading.Event() for name in ("loop", "step", "released")})


class BlockedPlainLoop(BaseAgentLoop):
    """One iteration of a plain ``def advance_state`` that blocks its thread until the sibling
    coroutine branch releases it; its result says whether it was released (or gave up)."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"token": input, "released": None}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        meeting = _meeting(state["token"])
        meeting["loop"].set()
        return {**state, "released": meeting["released"].wait(MEETING_SECONDS)}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["released"] is not None

    def build_result(self, *, state: Any) -> Any:
        return {"released": state["released"]}


@step
def blocked_plain_step(token: str) -> Any:
    """A plain ``@step`` that blocks its thread until the sibling coroutine branch releases it."""
    meeting = _meeting(token)
    meeting["step"].set()
    return {"released": meeting["released"].wait(MEETING_SECONDS)}


class ReleasingLoop(BaseAgentLoop):
    """Awaits, one short sleep per iteration, until both plain branches are blocked, then
    releases them: it can only run while they block if they block off the pack's event loop."""

    max_iterations = 10_000

    def create_initial_state(self, *, input: Any) -> Any:
        return {"token": input, "done": False}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        meeting = _meeting(state["token"])
        if not (meeting["loop"].is_set() and meeting["step"].is_set()):
            await asyncio.sleep(0.005)
            return state
        meeting["released"].set()
        return {**state, "done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return {"released": True}


class PlainBesideAsync(BaseCompositeAgent):
    """Nothing set: the rule packs all three branches (``docs/how-to/packing.md``): a plain loop
    and a plain ``@step`` that block until the coroutine loop beside them releases them."""

    branch_runnables = (BlockedPlainLoop, blocked_plain_step, ReleasingLoop)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=BlockedPlainLoop, input=input, key="plain_loop"),
            Branch(runnable=blocked_plain_step, input=input, key="plain_step"),
            Branch(runnable=ReleasingLoop, input=input, key="releasing"),
        ]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return {result.key: result.output for result in results}


register("parity.plain_beside_async", PlainBesideAsync)

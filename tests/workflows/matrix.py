"""The guarantee matrix's workflows (``tests/faults/matrix.py``): one loop of model calls, run
alone, one task per branch, packed, as a pipeline stage, or in a batch, with each kind of model
step (``ModelRequest.send``, streamed, a forced tool call, an AI-driven turn).

Every call carries ``[cell:<tag>/<branch>:<iteration>]`` in what it sends, so the model server
can attribute each request to its run, branch and iteration (``tests/faults/invariants.py``);
the rig's model answers such a call after a short delay with a fixed usage
(``tests/faults/chaos_model.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from types import SimpleNamespace
from typing import Any

from agentloop.actions import AgentActionRegistry, ModelProcessor, ModelRequest
from agentloop.loops import BaseAgentLoop
from agentloop.loops.ai_driven import AiDrivenAgentLoop
from agentloop.orchestration.llm.provider import processor_from_env
from agentloop.orchestration.registry import register
from agentloop.orchestration.runtime.context import standard_context
from agentloop.pipelines import BaseAgentPipeline, BaseCompositeAgent, Branch
from workflows.limits import TOOL_ID, Answer, StaticToolStore

#: The kinds of model step a cell's loop makes.
STEPS = ("send", "stream", "forced", "ai")


def cell_marker(tag: str, iteration: int) -> str:
    """What a call of branch ``tag`` (``<run tag>/<branch>``) at ``iteration`` carries."""
    return f"[cell:{tag}:{iteration}]"


@cache
def _streaming_processor() -> ModelProcessor:
    return processor_from_env({**os.environ, "AGENTLOOP_MODEL_STREAM": "1"})


class CellAnswer(Answer):
    """The forced ``answer`` tool call, asked with the cell's marker."""

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return f"Answer {cell_marker(arguments['branch'], arguments['call'])}."


class CellCalls(BaseAgentLoop):
    """Input ``{"tag", "calls", "step"}``: ``calls`` model calls, one per iteration, each made
    the way ``step`` says (one of :data:`STEPS` but ``ai``)."""

    max_iterations = 50

    @property
    def registry(self) -> AgentActionRegistry:
        return AgentActionRegistry.create(actions=[CellAnswer()])

    def create_initial_state(self, *, input: Any) -> Any:
        return {"tag": input["tag"], "calls": input["calls"], "step": input.get("step", "send"), "n": 0}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        if state["step"] == "forced":
            await self.perform_action(name="answer", arguments={"branch": state["tag"], "call": iteration})
        else:
            processor = self.context.processor
            if state["step"] == "stream":  # the context's streaming processor (inline), else the env's
                processor = getattr(self.context, "stream_processor", None) or _streaming_processor()
            response = await ModelRequest(instruction=cell_marker(state["tag"], iteration)).send(processor)
            if response.error is not None:
                raise RuntimeError(f"the model call failed: {response.error}")
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["calls"])

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


class CellTurn(AiDrivenAgentLoop):
    """One AI-driven turn: the model answers the marked request in text, which ends the loop."""

    def create_initial_state(self, *, input: Any) -> Any:
        return super().create_initial_state(input=cell_marker(input["tag"], 0))

    def build_result(self, *, state: Any) -> Any:
        return 1 if state["finished"] else 0


def _branches(input: Mapping[str, Any]) -> list[Branch]:
    runnable = CellTurn if input.get("step") == "ai" else CellCalls
    return [
        Branch(
            runnable=runnable,
            input={"tag": f"{input['tag']}/{i}", "calls": input["calls"], "step": input.get("step", "send")},
            key=str(i),
        )
        for i in range(input["width"])
    ]


class CellFan(BaseCompositeAgent):
    """``input["width"]`` branches, one task each; the result is each branch's call count."""

    max_concurrency = None
    branch_runnables = (CellCalls, CellTurn)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return _branches(input)

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


class CellPack(CellFan):
    """:class:`CellFan` with its branches packed two to a task."""

    pack_size = 2


class CellStage(BaseAgentPipeline):
    """A counting stage, then :class:`CellCalls` as the second stage (its input the run's)."""

    stages = (CellCalls, CellCalls)

    def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
        return {**input, "tag": f"{input['tag']}/{index}"}


class CellStages(CellStage):
    """:class:`CellStage` with its two stages in one ``agentloop.stages`` task: the size set (the
    matrix worker sets time limits, under which the rule alone keeps a task per stage)."""

    pack_size = 2


def build_context(spec: Mapping[str, Any] | None = None) -> Any:
    """The standard context's processor, with the forced tool's schema."""
    return SimpleNamespace(
        processor=standard_context(spec).processor, tool_store=StaticToolStore(), tool_id=TOOL_ID
    )


register("matrix.calls", CellCalls, context_factory=build_context)
register("matrix.turn", CellTurn, context_factory=build_context)
register("matrix.fan", CellFan)
register("matrix.pack", CellPack)
register("matrix.stage", CellStage, context_factory=build_context)
register("matrix.stages", CellStages, context_factory=build_context)

"""A composite of three branches whose loops call the offline model, for the tracing tests."""

from __future__ import annotations

from typing import Any

from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.llm.offline import OfflineModel
from agentloop.orchestration.registry import register
from agentloop.pipelines import BaseCompositeAgent, Branch, BranchResult

#: Text that must never reach a span (prompts stay out of traces).
SECRET_PROMPT = "the prompt text stays out of every span"


class AskTwice(BaseAgentLoop):
    """Two iterations, each one model call."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input, "n": 0}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await OfflineModel().send_request(
            instruction=SECRET_PROMPT,
            tools=[],
            tool_choices=None,
            history_messages=[],
            documents=[],
            files=[],
            is_auto_handle_function_call=False,
        )
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= 2)

    def build_result(self, *, state: Any) -> Any:
        return state["input"]


class ThreeBranches(BaseCompositeAgent):
    branch_runnables = (AskTwice,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=AskTwice, input=key, key=key) for key in ("a", "b", "c")]

    def merge_results(self, *, results: list[BranchResult], input: Any) -> Any:
        return [result.output for result in results]


register("tracing.three_branches", ThreeBranches)

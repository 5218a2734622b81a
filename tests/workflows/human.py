"""Workflows that ask a person, for the human-in-the-loop tests (inline and on a real worker).

Imported by the test process and, through ``AGENTLOOP_IMPORTS``, by the worker.
"""

from __future__ import annotations

from typing import Any

from agentloop.actions.human import Question, QuestionKind, ask_human
from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.registry import register
from agentloop.pipelines import BaseAgentPipeline, BaseCompositeAgent, Branch, BranchResult

#: The schema the ``human.typed`` question's answer must meet.
COUNT_SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 0}},
    "required": ["count"],
    "additionalProperties": False,
}


class Quick(BaseAgentLoop):
    """Two plain iterations, then ``quick:<input>``."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input, "n": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= 2)

    def build_result(self, *, state: Any) -> Any:
        return f"quick:{state['input']}"


class Approve(BaseAgentLoop):
    """Iteration 0 works, iteration 1 asks for an approval, iteration 2 works: the steps it took."""

    question = Question(prompt="ship it?", kind=QuestionKind.APPROVAL)

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input, "steps": []}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        step = f"step{iteration}"
        if iteration == 1:
            step = f"approved={await ask_human(self.question)}"
        return {**state, "steps": [*state["steps"], step]}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return len(state["steps"]) >= 3

    def build_result(self, *, state: Any) -> Any:
        return {"input": state["input"], "steps": state["steps"]}


class Typed(Approve):
    """Asks for JSON meeting :data:`COUNT_SCHEMA`."""

    question = Question(prompt="how many?", schema=COUNT_SCHEMA)


class Expiring(Approve):
    """Asks a question that expires after a second, answered ``"nobody"`` then."""

    question = Question(
        prompt="anyone?", kind=QuestionKind.CHOICE, choices=("yes", "no"), expires_in=1.0, default="nobody"
    )


class ExpiringUnanswerable(Approve):
    """Asks a question that expires after a second, with no default: the run fails."""

    question = Question(prompt="last call?", kind=QuestionKind.APPROVAL, expires_in=1.0)


class ExpiringSoon(Approve):
    """Asks a question that expires after ``input`` seconds (less than one, or just one), answered
    ``"nobody"`` then."""

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        if iteration != 1:
            return await super().advance_state(state=state, iteration=iteration)
        question = Question(
            prompt="quick?", kind=QuestionKind.APPROVAL, expires_in=state["input"], default="nobody"
        )
        return {**state, "steps": [*state["steps"], f"approved={await ask_human(question)}"]}


class FanWithApproval(BaseCompositeAgent):
    """Three branches; ``b`` asks for an approval, ``a`` and ``c`` do not. A task per branch (a
    chord whose one branch pauses: ``test_human_celery.py``); packed, ``human.packed_approvals``."""

    branch_runnables = (Quick, Approve)
    pack_size: int | None = 1

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=Quick, input="a", key="a"),
            Branch(runnable=Approve, input="b", key="b"),
            Branch(runnable=Quick, input="c", key="c"),
        ]

    def merge_results(self, *, results: list[BranchResult], input: Any) -> Any:
        return {result.key: result.output for result in results}


class FanWithTwoApprovals(FanWithApproval):
    """Three branches; ``b`` and ``c`` each ask for an approval, at once (packed by the rule)."""

    pack_size = None

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=Quick, input="a", key="a"),
            Branch(runnable=Approve, input="b", key="b"),
            Branch(runnable=Approve, input="c", key="c"),
        ]


class AwaitingQuick(Quick):
    """:class:`Quick` whose step is a coroutine: the packing rule packs it."""

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1}


class PackedApprovals(FanWithApproval):
    """Four branches the packing rule packs into one task (no pack size set): ``a`` and ``d``
    do not ask, ``b`` and ``c`` each ask for an approval, at once."""

    branch_runnables = (AwaitingQuick, Approve)
    max_concurrency = None
    pack_size = None

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=AwaitingQuick, input="a", key="a"),
            Branch(runnable=Approve, input="b", key="b"),
            Branch(runnable=Approve, input="c", key="c"),
            Branch(runnable=AwaitingQuick, input="d", key="d"),
        ]


class ApproveIfTold(Approve):
    """:class:`Approve` for an input starting ``ask``; any other input's run asks nothing."""

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        if str(state["input"]).startswith("ask"):
            return await super().advance_state(state=state, iteration=iteration)
        return {**state, "steps": [*state["steps"], f"step{iteration}"]}


class StageThenApprove(BaseAgentPipeline):
    """A plain stage, then one that asks."""

    stages = (Quick, Approve)


for _name, _runnable in {
    "human.approve": Approve,
    "human.typed": Typed,
    "human.expiring": Expiring,
    "human.expiring_unanswerable": ExpiringUnanswerable,
    "human.expiring_soon": ExpiringSoon,
    "human.fan": FanWithApproval,
    "human.fan_of_two_questions": FanWithTwoApprovals,
    "human.pipeline": StageThenApprove,
    "human.packed_approvals": PackedApprovals,
    "human.approve_if_told": ApproveIfTold,
}.items():
    register(_name, _runnable)

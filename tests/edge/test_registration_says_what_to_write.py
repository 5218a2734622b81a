"""A pipeline's ``stages`` and a composite's ``branch_runnables`` are read from the class: anything
else is refused where it is declared, with what to write instead, not a ``TypeError`` deep in the
registry that keeps the worker from starting."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import BaseAgentLoop, BaseAgentPipeline, BaseCompositeAgent, Branch
from agentloop.orchestration.registry import RunnableRegistry, register


class Step(BaseAgentLoop):
    max_iterations = 1

    def create_initial_state(self, *, input: Any) -> Any:
        return input

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return state

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return True

    def build_result(self, *, state: Any) -> Any:
        return state


class StagesAsProperty(BaseAgentPipeline):
    @property
    def stages(self) -> tuple[type[Any], ...]:  # type: ignore[override]
        return (Step, Step)


class BranchesAsProperty(BaseCompositeAgent):
    @property
    def branch_runnables(self) -> tuple[type[Any], ...]:  # type: ignore[override]
        return (Step,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Step, input=input, key="only")]


def test_register_refuses_stages_written_as_a_property_and_says_what_to_write() -> None:
    with pytest.raises(TypeError) as refused:
        register("edge.stages_property")(StagesAsProperty)

    message = str(refused.value)
    assert "StagesAsProperty.stages is a property" in message
    assert "write it as a class attribute, `stages = (FirstStage, SecondStage)`" in message


def test_register_refuses_branch_runnables_written_as_a_property() -> None:
    with pytest.raises(
        TypeError, match=r"BranchesAsProperty\.branch_runnables is a property.*`branch_runnables = \("
    ):
        register("edge.branches_property", BranchesAsProperty)


def test_the_registry_refuses_them_too_when_given_the_class_directly() -> None:
    registry = RunnableRegistry()
    with pytest.raises(TypeError, match=r"StagesAsProperty\.stages is a property"):
        registry.register("edge.stages_property", StagesAsProperty)
    with pytest.raises(TypeError, match=r"BranchesAsProperty\.branch_runnables is a property"):
        registry.register("edge.branches_property", BranchesAsProperty)
    assert registry.names == ()


def test_a_nested_pipeline_with_property_stages_is_refused_where_its_parent_is_declared() -> None:
    class Outer(BaseAgentPipeline):
        stages = (Step, StagesAsProperty)

    with pytest.raises(TypeError, match=r"StagesAsProperty\.stages is a property"):
        register("edge.outer", Outer)


def test_stages_that_are_not_runnable_classes_are_named() -> None:
    class Named(BaseAgentPipeline):
        stages = (Step, "Step")  # type: ignore[assignment]

    class NotASequence(BaseAgentPipeline):
        stages = Step  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"Named\.stages\[1\] is 'Step', not a runnable class"):
        register("edge.named", Named)
    with pytest.raises(TypeError, match=r"NotASequence\.stages must be a tuple of runnable classes"):
        register("edge.not_a_sequence", NotASequence)


def test_class_attributes_register_with_their_parts() -> None:
    class Fine(BaseAgentPipeline):
        stages = [Step, Step]

    registry = RunnableRegistry()
    registry.register("edge.fine", register("edge.fine", Fine))
    assert registry.name_of(Step)

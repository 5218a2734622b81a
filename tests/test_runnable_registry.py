"""``RunnableRegistry``: only registered names can be run, declarations are found in modules, and
a pipeline's stages and a composite's branch runnables come along under derived names."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from agentloop.loops import ProceduralAgentLoop
from agentloop.orchestration.errors import ContextSpecError, UnknownInputProviderError, UnknownRunnableError
from agentloop.orchestration.registry import (
    RunnableRegistry,
    declared_name,
    derived_name,
    input_provider,
    register,
)
from agentloop.pipelines import BaseAgentPipeline, BaseCompositeAgent, Branch


class Echo(ProceduralAgentLoop):
    def create_initial_state(self, *, input: Any) -> Any:
        return input

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return state

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return True

    def build_result(self, *, state: Any) -> Any:
        return state


class Shout(Echo):
    pass


class TwoStages(BaseAgentPipeline):
    stages = (Echo, Shout)


class Fan(BaseCompositeAgent):
    branch_runnables = (Shout,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Shout, input=input, key="a")]


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    registry = RunnableRegistry()
    registry.register("echo", Echo)
    with pytest.raises(UnknownRunnableError, match=r"unknown runnable 'nope'; registered: echo") as refused:
        registry.get("nope")
    assert refused.value.known == ("echo",)
    assert "nope" not in registry and "echo" in registry


@pytest.mark.parametrize("name", [None, 3, ["echo"], {"echo": 1}, ""])
def test_a_name_that_is_not_a_string_is_refused(name: object) -> None:
    registry = RunnableRegistry()
    registry.register("echo", Echo)
    with pytest.raises(UnknownRunnableError):
        registry.get(name)
    assert name not in registry


def test_an_empty_registry_says_so() -> None:
    with pytest.raises(UnknownRunnableError, match=r"registered: \(none\)"):
        RunnableRegistry().get("echo")


def test_a_pipelines_stages_and_a_composites_branches_come_along_under_derived_names() -> None:
    registry = RunnableRegistry()
    registry.register("two", TwoStages)
    registry.register("fan", Fan)
    assert registry.name_of(TwoStages) == "two"
    assert registry.name_of(Echo) == derived_name(Echo) == f"{__name__}.Echo"
    assert registry.get(derived_name(Shout)).runnable is Shout
    assert registry.names == tuple(sorted(["two", "fan", derived_name(Echo), derived_name(Shout)]))


def test_an_explicit_name_wins_over_a_derived_one_for_the_same_class() -> None:
    registry = RunnableRegistry()
    registry.register("two", TwoStages)
    registry.register("echo", Echo)
    assert registry.name_of(Echo) == "echo"


def test_a_class_met_at_run_time_that_was_never_registered_is_refused() -> None:
    with pytest.raises(UnknownRunnableError, match="Shout"):
        RunnableRegistry().name_of(Shout)


def test_one_name_cannot_stand_for_two_classes() -> None:
    registry = RunnableRegistry()
    registry.register("echo", Echo)
    registry.register("echo", Echo)  # the same class again is fine
    with pytest.raises(ValueError, match="already registered"):
        registry.register("echo", Shout)


def test_only_runnable_classes_with_a_name_can_be_registered() -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        RunnableRegistry().register("", Echo)
    with pytest.raises(TypeError, match="not a runnable class"):
        RunnableRegistry().register("x", object)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a runnable class"):
        register("x", len)  # type: ignore[call-overload]


def test_a_context_factory_that_rejects_the_spec_is_a_context_spec_error() -> None:
    def factory(spec: Any) -> Any:
        raise ValueError("no such tenant")

    registration = RunnableRegistry().register("echo", Echo, context_factory=factory)
    with pytest.raises(ContextSpecError, match="no such tenant"):
        registration.build_context({"tenant": "x"})
    with pytest.raises(ContextSpecError, match="JSON object"):
        registration.build_context(["not", "an", "object"])  # type: ignore[arg-type]
    plain = RunnableRegistry().register("plain", Echo)
    assert plain.build_context(None) == {} and plain.build_context({"a": 1}) == {"a": 1}


@pytest.fixture
def declaring_module() -> Iterator[str]:
    """A module that declares runnables and an input provider the way a deployment does."""
    module = types.ModuleType("declaring_module_for_tests")

    @register("mod.echo", context_factory=lambda spec: {"from": "factory", **spec})
    class Declared(Echo):
        pass

    class Undeclared(Declared):  # a subclass does not inherit its parent's declaration
        pass

    @input_provider("mod.numbers")
    def numbers(n: int = 3) -> list[int]:
        return list(range(n))

    module.Declared, module.Undeclared, module.numbers = Declared, Undeclared, numbers  # type: ignore[attr-defined]
    module.Pipe = register("mod.pipe", type("Pipe", (BaseAgentPipeline,), {"stages": (Declared,)}))  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        yield module.__name__
    finally:
        del sys.modules[module.__name__]


def test_a_registry_takes_what_the_listed_modules_declare(declaring_module: str) -> None:
    registry = RunnableRegistry.from_modules([declaring_module])
    module = sys.modules[declaring_module]
    assert registry.get("mod.echo").runnable is module.Declared
    assert registry.get("mod.echo").build_context({"a": 1}) == {"from": "factory", "a": 1}
    assert registry.get("mod.pipe").runnable is module.Pipe
    assert registry.name_of(module.Declared) == "mod.echo"
    assert module.Undeclared not in {registry.get(name).runnable for name in registry.names}
    assert list(registry.input_provider("mod.numbers")(n=2)) == [0, 1]
    assert declared_name(module.Declared) == "mod.echo"
    with pytest.raises(UnknownRunnableError):
        declared_name(module.Undeclared)


def test_reading_a_module_twice_changes_nothing(declaring_module: str) -> None:
    registry = RunnableRegistry.from_modules([declaring_module])
    before = registry.names
    registry.include_module(declaring_module)
    assert registry.names == before


def test_an_unknown_input_provider_is_refused_with_the_known_ones() -> None:
    registry = RunnableRegistry()
    registry.register_input_provider("numbers", lambda: [1])
    with pytest.raises(
        UnknownInputProviderError, match=r"unknown input provider 'nope'; registered: numbers"
    ):
        registry.input_provider("nope")
    with pytest.raises(UnknownInputProviderError):
        registry.input_provider(None)


def test_unregistering_forgets_the_name_and_the_class() -> None:
    registry = RunnableRegistry()
    registry.register("echo", Echo)
    registry.unregister("echo")
    assert "echo" not in registry
    with pytest.raises(UnknownRunnableError):
        registry.name_of(Echo)

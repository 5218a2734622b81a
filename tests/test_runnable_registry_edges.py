"""``RunnableRegistry`` and the declarations at their edges: the exact words of each refusal, parts
that come along whatever else is registered, a composite that fans out into itself, declarations
under several names, includes read from a module, and forgetting a name that was never there."""

from __future__ import annotations

import re
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
        return {"result": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return state


class First(Echo):
    pass


class Second(Echo):
    pass


class OnlyBranch(Echo):
    pass


class Fan(BaseCompositeAgent):
    branch_runnables = (OnlyBranch,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=OnlyBranch, input=input, key="a")]


class Pair(BaseAgentPipeline):
    stages = (First, Second)


def exactly(text: str) -> str:
    return f"^{re.escape(text)}$"


# ----- refusals, word for word -----------------------------------------------------------------------


def test_an_unknown_name_is_named_and_every_known_one_listed() -> None:
    registry = RunnableRegistry()
    registry.register("b.two", Echo)
    registry.register("a.one", First)
    with pytest.raises(
        UnknownRunnableError, match=exactly("unknown runnable 'x'; registered: a.one, b.two")
    ) as e:
        registry.get("x")
    assert (e.value.name, e.value.known) == ("x", ("a.one", "b.two"))


def test_an_undeclared_class_is_named_by_its_derived_name() -> None:
    with pytest.raises(UnknownRunnableError) as refused:
        declared_name(Second)
    assert refused.value.name == derived_name(Second) == f"{__name__}.Second"
    assert str(refused.value) == f"unknown runnable '{__name__}.Second'; registered: (none)"


def test_a_context_spec_that_is_not_an_object_is_named_by_its_type() -> None:
    registration = RunnableRegistry().register("echo", Echo)
    with pytest.raises(ContextSpecError, match=exactly("the context spec must be a JSON object, got list")):
        registration.build_context([1])  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", 3, None])
def test_a_runnable_needs_a_non_empty_string_name_everywhere_it_is_given_one(name: Any) -> None:
    message = exactly("a runnable name must be a non-empty string")
    with pytest.raises(ValueError, match=message):
        RunnableRegistry().register(name, Echo)
    with pytest.raises(ValueError, match=message):
        register(name, Echo)


@pytest.mark.parametrize(("name", "provider"), [("", list), (3, list), ("numbers", "not callable")])
def test_an_input_provider_needs_a_non_empty_name_and_a_callable(name: Any, provider: Any) -> None:
    with pytest.raises(ValueError, match=exactly("an input provider needs a non-empty name and a callable")):
        RunnableRegistry().register_input_provider(name, provider)


@pytest.mark.parametrize("name", ["", 3])
def test_an_input_provider_is_declared_under_a_non_empty_name(name: Any) -> None:
    with pytest.raises(ValueError, match=exactly("an input provider needs a non-empty name")):
        input_provider(name)


def test_an_unknown_input_provider_lists_every_known_one_or_says_there_is_none() -> None:
    registry = RunnableRegistry()
    with pytest.raises(
        UnknownInputProviderError, match=exactly("unknown input provider 'x'; registered: (none)")
    ):
        registry.input_provider("x")
    registry.register_input_provider("b", list)
    registry.register_input_provider("a", list)
    with pytest.raises(
        UnknownInputProviderError, match=exactly("unknown input provider 'x'; registered: a, b")
    ):
        registry.input_provider("x")


def test_parts_that_are_not_a_tuple_are_refused_and_their_type_named() -> None:
    class Named(BaseAgentPipeline):
        stages = "First, Second"  # type: ignore[assignment]

    with pytest.raises(TypeError) as refused:
        RunnableRegistry().register("named", Named)
    assert str(refused.value) == (
        "test_parts_that_are_not_a_tuple_are_refused_and_their_type_named.<locals>.Named.stages must be "
        "a tuple of runnable classes (`stages = (FirstStage, SecondStage)`), not str"
    )


def test_an_include_that_is_not_a_runnable_class_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=exactly("<class 'object'> is not a runnable class")):
        RunnableRegistry().register("echo", Echo, includes=(object,))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=exactly("<class 'object'> is not a runnable class")):
        register("echo", Echo, includes=(object,))  # type: ignore[arg-type]


# ----- parts -------------------------------------------------------------------------------------------


def test_a_composites_branch_runnables_come_along_when_it_is_registered_alone() -> None:
    registry = RunnableRegistry()
    registry.register("fan", Fan)
    assert registry.get(derived_name(OnlyBranch)).runnable is OnlyBranch


def test_parts_come_along_with_the_registrants_context_factory() -> None:
    def factory(spec: Any) -> Any:
        return {"built": True, **spec}

    registry = RunnableRegistry()
    registry.register("pair", Pair, context_factory=factory)
    assert registry.get(derived_name(First)).build_context({"a": 1}) == {"built": True, "a": 1}


def test_every_stage_comes_along_even_when_another_is_registered_already() -> None:
    registry = RunnableRegistry()
    registry.register("second", Second)  # the stage met first already has a name
    registry.register("pair", Pair)
    assert registry.name_of(First) == derived_name(First)
    assert registry.name_of(Second) == "second"


def test_a_composite_that_fans_out_into_itself_is_registered_once() -> None:
    class Tree(BaseCompositeAgent):
        def build_branches(self, *, input: Any) -> list[Branch]:
            return []

    Tree.branch_runnables = (Tree, Echo)
    registry = RunnableRegistry()
    registry.register("tree", Tree)
    assert registry.name_of(Tree) == "tree" and registry.name_of(Echo) == derived_name(Echo)
    register("tree", Tree)  # the declaration terminates too


def test_unregistering_a_name_that_was_never_there_does_nothing() -> None:
    registry = RunnableRegistry()
    registry.register("echo", Echo)
    registry.unregister("nope")
    assert registry.names == ("echo",)


# ----- declarations --------------------------------------------------------------------------------------


class Proxy:
    """A module-level object that answers any attribute (a settings proxy, a mock): not a provider."""

    def __getattr__(self, name: str) -> str:
        return "looks-like-a-name"


@pytest.fixture
def module_with_includes() -> Iterator[types.ModuleType]:
    module = types.ModuleType("registry_edges_module_for_tests")

    class Included(Echo):
        pass

    class Twice(Echo):
        pass

    register("edges.twice.a", Twice)
    register("edges.twice.b", Twice)
    module.Host = register("edges.host", type("Host", (Echo,), {}), includes=(Included,))  # type: ignore[attr-defined]
    module.Included, module.Twice, module.proxy = Included, Twice, Proxy()  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        yield module
    finally:
        del sys.modules[module.__name__]


def test_a_module_brings_its_declared_includes_and_every_name_of_a_class(
    module_with_includes: types.ModuleType,
) -> None:
    registry = RunnableRegistry.from_modules([module_with_includes.__name__])
    assert registry.get(derived_name(module_with_includes.Included)).runnable is module_with_includes.Included
    assert registry.get("edges.twice.a").runnable is registry.get("edges.twice.b").runnable
    assert declared_name(module_with_includes.Twice) == "edges.twice.a"
    with pytest.raises(UnknownInputProviderError):
        registry.input_provider("looks-like-a-name")  # the proxy was not taken for a provider

"""``standard_context``: processor, tool store and run store from the settings, in one call."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typed_workflows import LabelStage, LabelTicket

from agentloop import (
    InlineAgentRunner,
    InMemoryUsageMeter,
    OfflineModel,
    StandardContext,
    StandardContextFactory,
    load_settings,
    standard_context,
    sync_tools,
    use_meter,
)
from agentloop.orchestration.errors import ContextSpecError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.context import process_context_factory
from agentloop.orchestration.store import SqlRunStore, SqlToolStore


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[StandardContextFactory]:
    settings = load_settings({"DATABASE_URL": f"sqlite:///{tmp_path / 'app.sqlite3'}"})
    made = StandardContextFactory(settings)
    try:
        yield made
    finally:
        made.close()


def test_the_factory_builds_the_processor_and_both_stores_from_the_settings(
    factory: StandardContextFactory,
) -> None:
    context = factory({"history_messages": [{"role": "user", "content": "hi"}]})

    assert isinstance(context.processor, OfflineModel)  # no key set
    assert isinstance(context.tool_store, SqlToolStore) and isinstance(context.run_store, SqlRunStore)
    assert context.history_messages == ({"role": "user", "content": "hi"},)
    assert (context.documents, context.files) == ((), ())
    assert factory({}).tool_store is context.tool_store  # the process's stores, opened once
    assert factory({}).processor is not context.processor  # a processor per context


def test_a_spec_gives_only_the_standard_keys(factory: StandardContextFactory) -> None:
    with pytest.raises(ValueError, match=r"unknown context spec keys \['api_key'\]"):
        factory({"api_key": "sk-secret"})
    with pytest.raises(ValueError, match="'documents' must be a list"):
        factory({"documents": "one"})


def test_as_a_context_factory_a_refused_spec_is_a_context_spec_error(factory: StandardContextFactory) -> None:
    registry = RunnableRegistry()
    registration = registry.register("typed.label", LabelStage, context_factory=factory)

    with pytest.raises(ContextSpecError, match="unknown context spec keys"):
        registration.build_context({"model": "x"})
    assert isinstance(registration.build_context({}), StandardContext)


async def test_a_typed_step_runs_on_the_standard_context_once_its_tools_are_synced(
    factory: StandardContextFactory,
) -> None:
    context = factory({})
    assert context.tool_store is not None
    sync_tools(context.tool_store, [LabelTicket])

    result = await InlineAgentRunner.create(runnable=LabelStage, context=context).request(input={"text": "x"})

    assert result["label"] in ("bug", "feature")  # a stage's result is JSON


@dataclass(frozen=True, kw_only=True)
class TicketContext(StandardContext):
    queue: str = "support"


def test_an_application_extends_it_with_its_own_slots(factory: StandardContextFactory) -> None:
    base = factory({"files": ["a.txt"]})

    extended = base.extend(TicketContext, queue="billing")

    assert isinstance(extended, TicketContext) and extended.queue == "billing"
    assert (extended.processor, extended.tool_store, extended.files) == (
        base.processor,
        base.tool_store,
        ("a.txt",),
    )
    with pytest.raises(TypeError, match="subclass of StandardContext"):
        base.extend(dict)  # type: ignore[type-var]


def test_the_meter_is_the_running_steps() -> None:
    context = StandardContext(processor=OfflineModel())
    meter = InMemoryUsageMeter()

    assert context.meter is None
    with use_meter(meter):
        assert context.meter is meter


def test_standard_context_uses_one_factory_per_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'process.sqlite3'}")
    process_context_factory.cache_clear()
    try:
        first: Any = standard_context()
        second: Any = standard_context({})
        assert first.run_store is second.run_store
        assert process_context_factory() is process_context_factory()
    finally:
        process_context_factory().close()
        process_context_factory.cache_clear()

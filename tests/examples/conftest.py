"""Fixtures for the record-search example: one sample database per session, contexts over it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop.examples.record_search import RecordSearchContext, RecordSearchResources, open_resources


@pytest.fixture(scope="session")
def record_db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder: Path = tmp_path_factory.mktemp("record-search")
    return f"sqlite:///{folder / 'records.sqlite3'}"


@pytest.fixture(scope="session")
def record_resources(record_db_url: str) -> Iterator[RecordSearchResources]:
    """The sample database (built once), its search service and tool store."""
    resources = open_resources(record_db_url)
    try:
        yield resources
    finally:
        resources.dispose()


@pytest.fixture
def make_context(record_resources: RecordSearchResources) -> Callable[..., RecordSearchContext]:
    """``make_context(processor, **overrides)``: the agent's context over the sample database."""

    def make(processor: Any, **overrides: Any) -> RecordSearchContext:
        options: dict[str, Any] = {
            "processor": processor,
            "record_search_service": record_resources.service,
            "tool_store": record_resources.tool_store,
            "searchable_categories": record_resources.searchable_categories,
            **overrides,
        }
        return RecordSearchContext(**options)

    return make


@pytest.fixture
def no_model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OpenAI settings in the environment: the defaults pick the offline model."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)

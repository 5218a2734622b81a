"""Fixtures for the model-processor tests: a local OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestration.testing.servers.openai_server import OpenAICompatibleServer


@pytest.fixture
def openai_server() -> Iterator[OpenAICompatibleServer]:
    """A running :class:`OpenAICompatibleServer`, stopped after the test."""
    with OpenAICompatibleServer() as server:
        yield server

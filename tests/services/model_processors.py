"""Fixtures of a provider's local test server and of processors pointed at it, for any row of the table.

One definition serves every provider of :data:`agentloop.orchestration.providers.table.PROVIDERS`
and every folder of tests: a conftest names its fixtures and their options, for instance::

    anthropic_server = server_fixture("anthropic", api_key=API_KEY)
    make_anthropic = processors_fixture("anthropic", "anthropic_server", api_key=API_KEY, stream=True)

``make_anthropic(**options)`` then builds a processor for the running server (a 5 s timeout, no
retries, the fixture's options, then the call's), and every one it built is closed after the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from agentloop.orchestration.providers.table import PROVIDERS, load

__all__ = ["processors_fixture", "server_fixture"]


def server_fixture(provider: str, **options: Any) -> Any:
    """A fixture: the running test server of ``provider`` (built with ``options``), stopped after the test."""
    server_class = load(PROVIDERS[provider].server)

    @pytest.fixture
    def running_server() -> Iterator[Any]:
        with server_class(**options) as server:
            yield server

    running_server.__doc__ = f"A running :class:`{server_class.__name__}` ({options or 'no options'})."
    return running_server


def processors_fixture(provider: str, server: str, **defaults: Any) -> Any:
    """A fixture: a function building ``provider``'s processors for the fixture ``server``, closed after."""
    processor_class = load(PROVIDERS[provider].processor)

    @pytest.fixture
    async def make_processors(request: pytest.FixtureRequest) -> AsyncIterator[Callable[..., Any]]:
        running = request.getfixturevalue(server)
        made: list[Any] = []

        def make(**options: Any) -> Any:
            settings = {"base_url": running.base_url, "timeout": 5.0, "max_retries": 0, **defaults}
            processor = processor_class(**{**settings, **options})
            made.append(processor)
            return processor

        yield make
        for processor in made:
            await processor.aclose()

    make_processors.__doc__ = f"{processor_class.__name__}s pointed at ``{server}`` (closed after the test)."
    return make_processors

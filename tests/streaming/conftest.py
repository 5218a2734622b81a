"""Fixtures of the streaming tests: the local OpenAI- and Anthropic-protocol servers (pieces of 4
characters, no delay, the key required), and processors for them that stream unless told
(built by ``tests/services/model_processors.py`` from the provider table)."""

from __future__ import annotations

from streaming_support import API_KEY

from tests.services.model_processors import processors_fixture, server_fixture

server = server_fixture("openai", api_key=API_KEY)
make_processor = processors_fixture("openai", "server", api_key=API_KEY, model="test-model", stream=True)
anthropic_server = server_fixture("anthropic", api_key=API_KEY)
make_anthropic = processors_fixture(
    "anthropic", "anthropic_server", api_key=API_KEY, model="claude-test", stream=True
)

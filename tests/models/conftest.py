"""Fixtures of the model-processor tests: local OpenAI- and Anthropic-wire servers, processors for them
(built by ``tests/services/model_processors.py`` from the provider table)."""

from __future__ import annotations

from anthropic_support import ANTHROPIC_KEY
from openai_support import API_KEY

from tests.services.model_processors import processors_fixture, server_fixture

openai_server = server_fixture("openai")
make_processor = processors_fixture("openai", "openai_server", api_key=API_KEY, model="test-model")
anthropic_server = server_fixture("anthropic")
make_anthropic = processors_fixture(
    "anthropic", "anthropic_server", api_key=ANTHROPIC_KEY, model="claude-test"
)

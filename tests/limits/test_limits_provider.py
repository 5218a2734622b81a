"""Picking a processor from the settings: ``ModelProvider``, ``processor_from_env``, the description."""

from __future__ import annotations

import pytest

from agentloop.orchestration.llm.limits.backends.memory import MemoryBackend
from agentloop.orchestration.llm.limits.backends.redis import RedisBackend
from agentloop.orchestration.llm.limits.processor import RateLimitedProcessor
from agentloop.orchestration.llm.limits.window import WindowRateLimiter
from agentloop.orchestration.llm.offline import OfflineModel
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.llm.provider import ModelProvider, describe_processor, processor_from_env
from agentloop.orchestration.settings import ModelSettings, load_settings


def model_settings(env: dict[str, str]) -> ModelSettings:
    return load_settings(env).model


def test_without_a_key_or_base_url_the_processor_is_the_offline_model() -> None:
    processor = processor_from_env({"OPENAI_API_KEY": "  ", "OPENAI_MODEL": "gpt-4o"})

    assert isinstance(processor, OfflineModel)
    assert describe_processor(processor) == "offline (deterministic, no API key)"


def test_an_application_can_bring_its_own_offline_model() -> None:
    mine = OfflineModel(responders={"answer": lambda tool, instruction, history: {"text": "42"}})

    assert processor_from_env({}, offline=lambda: mine) is mine


def test_a_key_or_a_base_url_selects_the_openai_processor_and_its_description_hides_secrets() -> None:
    keyed = processor_from_env({"OPENAI_API_KEY": "sk-secretsecretsecret", "OPENAI_MODEL": "gpt-4.1"})
    local = processor_from_env({"OPENAI_BASE_URL": "http://user:pw@127.0.0.1:8080/v1?token=abc"})

    assert isinstance(keyed, OpenAIProcessor) and isinstance(local, OpenAIProcessor)
    assert describe_processor(keyed) == "OpenAI-compatible model gpt-4.1 at https://api.openai.com/v1/"
    description = describe_processor(local)
    assert description.startswith("OpenAI-compatible model gpt-4o-mini at http://user:***@127.0.0.1:8080/v1")
    assert "pw" not in description and "abc" not in description


def test_the_processors_of_one_provider_share_its_limiter_and_other_providers_have_their_own() -> None:
    settings = model_settings(
        {"AGENTLOOP_MODEL_RPM": "30", "AGENTLOOP_MODEL_TPM": "9000", "AGENTLOOP_MODEL_LIMIT_NAME": "t-local"}
    )
    provider = ModelProvider(settings)

    first, second = provider.processor(), provider.processor()
    other = ModelProvider(settings).processor()

    assert isinstance(first, RateLimitedProcessor) and isinstance(second, RateLimitedProcessor)
    assert isinstance(first.inner, OfflineModel) and first.inner is not second.inner
    limiter = first.limiter
    assert isinstance(limiter, WindowRateLimiter) and isinstance(limiter.backend, MemoryBackend)
    assert second.limiter is limiter and provider.limiter is limiter
    assert isinstance(other, RateLimitedProcessor) and other.limiter is not limiter
    assert (limiter.requests_per_minute, limiter.tokens_per_minute) == (30, 9000)
    assert limiter.window == 60 and limiter.max_wait == 120
    assert describe_processor(first) == (
        "offline (deterministic, no API key); rate-limited: 30 requests and 9000 tokens per 60s window, "
        "in-process agentloop:ratelimit:t-local"
    )


def test_without_limits_a_provider_has_no_limiter_and_its_processors_are_not_wrapped() -> None:
    provider = ModelProvider(ModelSettings())

    assert provider.limiter is None
    assert isinstance(provider.processor(), OfflineModel)


def test_with_redis_url_the_limit_is_shared_through_redis_and_named_after_the_model() -> None:
    processor = processor_from_env(
        {
            "OPENAI_API_KEY": "sk-secretsecretsecret",
            "OPENAI_MODEL": "gpt-4o",
            "REDIS_URL": "redis://:hunter2@redis.internal:6380/2",
            "AGENTLOOP_MODEL_TPM": "1000",
            "AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS": "0.5",
            "AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS": "3",
        }
    )

    assert isinstance(processor, RateLimitedProcessor)
    limiter = processor.limiter
    assert isinstance(limiter, WindowRateLimiter) and isinstance(limiter.backend, RedisBackend)
    assert (limiter.key, limiter.requests_per_minute, limiter.tokens_per_minute) == (
        "agentloop:ratelimit:gpt-4o",
        None,
        1000,
    )
    assert (limiter.window, limiter.max_wait) == (0.5, 3)
    description = describe_processor(processor)
    assert description == (
        "OpenAI-compatible model gpt-4o at https://api.openai.com/v1/; rate-limited: 1000 tokens per "
        "0.5s window, redis redis://:***@redis.internal:6380/2 key agentloop:ratelimit:gpt-4o"
    )
    assert "hunter2" not in description and "sk-" not in description


@pytest.mark.parametrize(
    "env",
    [
        {"AGENTLOOP_MODEL_RPM": "ten"},
        {"AGENTLOOP_MODEL_RPM": "0"},
        {"AGENTLOOP_MODEL_TPM": "-3"},
        {"AGENTLOOP_MODEL_RPM": "5", "AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS": "0"},
        {"AGENTLOOP_MODEL_RPM": "5", "AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS": "soon"},
    ],
)
def test_malformed_limit_settings_are_clear_errors(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="AGENTLOOP_MODEL_"):
        processor_from_env(env)


def test_unknown_processors_are_described_by_class_and_model() -> None:
    class Custom:
        model = "my-model"

    assert describe_processor(Custom()) == "Custom (my-model)"
    assert describe_processor(object()) == "object"

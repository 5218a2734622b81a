"""Per-key rate limits and token budgets (``llm/limits/keyed.py``) on a frozen clock: each
concurrency key gets its own requests per window and its own token budget per period, on top of
the shared limit; a run without a key is not limited by them; the provider wires them from the
settings. Counted, never timed."""

from __future__ import annotations

from typing import Any

from agentloop.actions import AiResponse, ModelRequest, Usage
from agentloop.orchestration.fairness.current import running_key
from agentloop.orchestration.llm.limits import MemoryBackend, RateLimitedProcessor
from agentloop.orchestration.llm.limits.keyed import KeyedRateLimiter
from agentloop.orchestration.llm.provider import ModelProvider, describe_processor
from agentloop.orchestration.settings import load_settings

REQUEST = ModelRequest(instruction="say hi")


class CountingModel:
    """Answers at once with 30 + 20 tokens; counts the calls that reached it."""

    def __init__(self) -> None:
        self.calls = 0

    async def send_request(self, **request: Any) -> AiResponse:
        self.calls += 1
        return AiResponse(text="hi", usage=Usage(input_tokens=30, output_tokens=20), model="counting")


async def _calls(processor: RateLimitedProcessor, key: str | None, n: int) -> list[bool]:
    answered = []
    with running_key(key):
        for _ in range(n):
            answered.append(not (await REQUEST.forward(processor)).has_error)
    return answered


async def test_each_key_has_its_own_requests_per_window_and_keyless_runs_are_not_limited() -> None:
    model = CountingModel()
    backend = MemoryBackend(clock=lambda: 5.0)  # one window for the whole test
    keyed = KeyedRateLimiter(backend, name="m", requests_per_minute=2, max_wait=0)
    processor = RateLimitedProcessor(model, keyed)

    assert await _calls(processor, "A", 3) == [True, True, False]  # A's third call: no slot, no call
    assert await _calls(processor, "B", 2) == [True, True]  # B's own two, whatever A did
    assert await _calls(processor, None, 5) == [True] * 5
    assert model.calls == 9
    assert "2 requests per 60s window" in keyed.describe()


async def test_a_keys_token_budget_stops_its_calls_once_spent_and_only_its_own() -> None:
    model = CountingModel()
    backend = MemoryBackend(clock=lambda: 100.0)
    keyed = KeyedRateLimiter(backend, name="m", token_budget=100, budget_period=86400.0)
    processor = RateLimitedProcessor(model, keyed)

    assert await _calls(processor, "A", 3) == [True, True, False]  # 50 + 50 tokens spend the 100
    refused = await _calls(processor, "A", 1)
    assert refused == [False] and model.calls == 2
    assert await _calls(processor, "B", 1) == [True]
    with running_key("A"):
        failure = await REQUEST.forward(processor)
    assert failure.has_error and "tokens limit" in str(failure.error)


def test_the_provider_limits_each_key_before_the_shared_limit() -> None:
    settings = load_settings(
        {
            "AGENTLOOP_MODEL_RPM": "100",
            "AGENTLOOP_MODEL_KEY_RPM": "5",
            "AGENTLOOP_MODEL_KEY_TOKEN_BUDGET": "900",
        }
    ).model
    processor = ModelProvider(settings).processor()
    assert isinstance(processor, RateLimitedProcessor) and isinstance(processor.limiter, KeyedRateLimiter)
    assert isinstance(processor.inner, RateLimitedProcessor)  # then the provider's shared limit
    described = describe_processor(processor)
    assert "per concurrency key: 5 requests" in described and "900 tokens per 86400s" in described
    assert ModelProvider(load_settings({}).model).keyed_limiter is None

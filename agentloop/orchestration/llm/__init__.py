"""Model processors: the OpenAI and Anthropic processors, the offline model, and provider rate limits.

- :class:`ModelProvider` builds the processor a deployment runs with from its
  :class:`~agentloop.orchestration.settings.ModelSettings` (OpenAI, Anthropic or a
  compatible server when configured, else the offline model; rate-limited when asked),
  and owns the limiter its processors share. :func:`processor_from_env` is
  the short way; :func:`describe_processor` says what a processor is.
- :class:`OpenAIProcessor` (Chat Completions on the ``openai`` SDK),
  :class:`AnthropicProcessor` (the Messages API on the ``anthropic`` SDK, an
  optional extra) and :class:`OfflineModel` (deterministic, no key) implement the processor
  protocol on :class:`BaseProcessor`, which hands them one
  :class:`~agentloop.actions.model.ModelRequest` per turn.
- Rate limits (:mod:`agentloop.orchestration.llm.limits`): :class:`WindowRateLimiter`,
  one fixed-window algorithm over a :class:`MemoryBackend` or a
  :class:`RedisBackend`, and :class:`RateLimitedProcessor`, which asks it for
  a slot before each call.

The package exports nothing itself, so importing it loads no SDK and no ``redis``: the public
names (the processors, :func:`processor_from_env`) are imported from ``agentloop``, which loads
those that import a model SDK on first use; every other name from the module that defines it. The
errors of this package (:class:`~agentloop.orchestration.errors.RateLimitTimeoutError`,
:class:`~agentloop.orchestration.errors.ModelRequestsBlockedError`) live in
``orchestration/errors.py``.
"""

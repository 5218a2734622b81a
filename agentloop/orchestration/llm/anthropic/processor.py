"""``AnthropicProcessor``: the model-processor protocol on the official ``anthropic`` SDK.

An optional extra: ``pip install 'agentloop[anthropic]'``. One
:meth:`AnthropicProcessor.send_request` is one Messages API request
(``client.messages.create``) against Anthropic or any server speaking the
Messages API (``base_url``). The SDK does the transport work: it retries 408,
409, 429, 5xx, connection errors and timeouts ``max_retries`` times with
exponential backoff, honouring ``retry-after``/``retry-after-ms``, and applies
``timeout`` to every attempt.

What every SDK processor does alike (the per-loop clients, the request guard, the failures as
values, the usage hook, streaming) is :class:`~agentloop.orchestration.llm.sdk_processor.SdkProcessor`'s.
The processor never raises for a model fault. Every failure (an HTTP error
after the retries, a connection error, a timeout, a history message it cannot
map, anything unexpected) comes back as :meth:`AiResponse.failure` with a short
message such as ``"anthropic: 429 rate limited after 4 attempts: slow down"``.
Messages never contain the API key.

The mapping (:mod:`agentloop.orchestration.llm.anthropic.mapping`): the instruction and
documents are the system prompt; a forced tool is ``tool_choice={"type": "tool",
"name": ...}``; ``tool_use`` blocks come back as :attr:`AiResponse.function_calls`
(their ``input`` JSON-encoded), ``usage`` from ``input_tokens``/``output_tokens``.
``files`` are not sent yet; tools are never executed here.

With ``stream=True`` the same request is streamed and read back by
:mod:`agentloop.orchestration.llm.anthropic.stream` into the same :class:`AiResponse`; while a run
listens, the partial text and tool input are reported as throttled ``delta`` progress events
(:mod:`agentloop.orchestration.llm.stream_deltas`). A failure mid-stream (a dropped connection, a
malformed event, an ``error`` event, a stream cut short) is a failure like any other; one cut
short, disconnected or stalled is read again first, up to ``max_retries`` times.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Self

try:
    from anthropic import AsyncAnthropic, omit
except ModuleNotFoundError as missing:  # the optional extra is not installed
    raise ModuleNotFoundError(
        "AnthropicProcessor needs the anthropic SDK: pip install 'agentloop[anthropic]'", name=missing.name
    ) from missing

from agentloop.actions.model import AiResponse, ModelRequest
from agentloop.orchestration.llm.anthropic.errors import ANTHROPIC_ERRORS
from agentloop.orchestration.llm.anthropic.mapping import (
    from_message,
    to_anthropic_request,
    to_anthropic_tool_choice,
    to_anthropic_tools,
)
from agentloop.orchestration.llm.anthropic.stream import MessageStreamReader
from agentloop.orchestration.llm.base import UsageHook
from agentloop.orchestration.llm.sdk_processor import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    SdkProcessor,
)
from agentloop.orchestration.llm.stream_deltas import DeltaReporter
from agentloop.orchestration.llm.tool_shapes import offered_tools
from agentloop.orchestration.settings import ModelSettings
from agentloop.orchestration.settings.provider import DEFAULT_ANTHROPIC_MODEL

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MAX_TOKENS", "DEFAULT_MODEL", "AnthropicProcessor"]

DEFAULT_MODEL = DEFAULT_ANTHROPIC_MODEL
DEFAULT_MAX_TOKENS = 4096
DEFAULT_BASE_URL = "https://api.anthropic.com"


class AnthropicProcessor(SdkProcessor[AsyncAnthropic]):
    """A :class:`~agentloop.actions.model.ModelProcessor` backed by ``anthropic.AsyncAnthropic`` (Messages
    API).

    ``timeout`` (seconds or a ``timedelta``, default 60 s) bounds each attempt;
    ``max_retries`` (default 3) is how many times the SDK retries a retryable
    failure, so a request makes at most ``max_retries + 1`` attempts.
    ``max_tokens`` bounds each reply (the API requires it). ``base_url``
    selects any server speaking the Messages API (default: Anthropic's); with a
    non-default ``base_url`` the key may be omitted (a placeholder is sent).
    It keeps one SDK client per event loop (:mod:`~agentloop.orchestration.llm.loop_clients`), so one
    processor serves any number of ``asyncio.run`` calls and threads.
    ``on_usage`` is called with the usage of every reply, for accounting; its
    failures are logged, never raised. ``stream=True`` streams every reply and
    reports its partial output as ``delta`` events, at most one per
    ``stream_interval`` (seconds or a ``timedelta``, default 100 ms) for each
    piece of the reply; the result is the same as without streaming.
    """

    errors = ANTHROPIC_ERRORS
    default_base_url = DEFAULT_BASE_URL
    missing_key = "an Anthropic API key is required (pass api_key or set ANTHROPIC_API_KEY)"
    stream_piece = "event"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str = DEFAULT_MODEL,
        timeout: float | timedelta = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        on_usage: UsageHook | None = None,
        stream: bool = False,
        stream_interval: float | timedelta | None = None,
    ) -> None:
        seconds = self._configure(
            model=model,
            timeout=timeout,
            max_retries=max_retries,
            on_usage=on_usage,
            stream=stream,
            stream_interval=stream_interval,
        )
        if isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, not {max_tokens!r}")
        self._max_tokens = max_tokens
        self._own_clients(
            AsyncAnthropic, api_key=api_key, base_url=base_url, timeout=seconds, max_retries=max_retries
        )

    @classmethod
    def from_settings(cls, settings: ModelSettings, *, on_usage: UsageHook | None = None) -> Self:
        """Build from the model settings: ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``,
        ``AGENTLOOP_MODEL``, ``ANTHROPIC_TIMEOUT_SECONDS``, ``ANTHROPIC_MAX_RETRIES``,
        ``ANTHROPIC_MAX_TOKENS``, ``AGENTLOOP_MODEL_STREAM`` and ``AGENTLOOP_MODEL_STREAM_INTERVAL_SECONDS``.

        Raises ``ValueError`` when there is no key and no ``ANTHROPIC_BASE_URL``.
        """
        provider = settings.provider
        key = provider.anthropic_api_key
        return cls(
            api_key=key.get_secret_value() if key is not None else None,
            base_url=provider.anthropic_base_url,
            model=provider.model_name or DEFAULT_MODEL,
            timeout=provider.anthropic_timeout_seconds,
            max_retries=provider.anthropic_max_retries,
            max_tokens=provider.anthropic_max_tokens,
            on_usage=on_usage,
            stream=provider.stream,
            stream_interval=provider.stream_interval_seconds,
        )

    # configuration, read-only

    @property
    def max_tokens(self) -> int:
        """The most tokens one reply may hold."""
        return self._max_tokens

    # the wire

    def _request_body(self, request: ModelRequest) -> dict[str, Any]:
        system, messages = to_anthropic_request(
            instruction=request.instruction,
            history_messages=request.history_messages,
            documents=request.documents,
        )
        tools = to_anthropic_tools(request.tools)
        tool_choice = to_anthropic_tool_choice(request.tool_choices, tools)
        tools = offered_tools(tools, request.tool_choices, lambda tool: tool["name"])
        return {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "system": system if system else omit,
            "messages": messages,
            "tools": tools if tools else omit,
            "tool_choice": tool_choice if tool_choice is not None else omit,
        }

    async def _send(self, client: AsyncAnthropic, body: dict[str, Any]) -> Any:
        return await client.messages.create(**body)

    async def _open_stream(self, client: AsyncAnthropic, body: dict[str, Any]) -> Any:
        return await client.messages.create(**body, stream=True)

    def _read_reply(self, reply: Any) -> AiResponse:
        return from_message(reply, default_model=self._model)

    def _stream_reader(self, reporter: DeltaReporter | None) -> MessageStreamReader:
        return MessageStreamReader(default_model=self._model, reporter=reporter)

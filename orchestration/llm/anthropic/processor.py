"""``AnthropicProcessor``: the model-processor protocol on the official ``anthropic`` SDK.

An optional extra: ``pip install 'agentloop[anthropic]'``. One
:meth:`AnthropicProcessor.send_request` is one Messages API request
(``client.messages.create``) against Anthropic or any server speaking the
Messages API (``base_url``). The SDK does the transport work: it retries 408,
409, 429, 5xx, connection errors and timeouts ``max_retries`` times with
exponential backoff, honouring ``retry-after``/``retry-after-ms``, and applies
``timeout`` to every attempt.

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

import asyncio
import copy
import logging
from datetime import timedelta
from typing import Any, Self

try:
    from anthropic import AnthropicError, AsyncAnthropic, omit
except ModuleNotFoundError as missing:  # the optional extra is not installed
    raise ModuleNotFoundError(
        "AnthropicProcessor needs the anthropic SDK: pip install 'agentloop[anthropic]'", name=missing.name
    ) from missing

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.model import AiResponse, ModelRequest, Usage
from agentloop.orchestration.interruptions import reraise_interruption
from agentloop.orchestration.llm.anthropic.errors import ANTHROPIC_ERRORS
from agentloop.orchestration.llm.anthropic.mapping import (
    from_message,
    to_anthropic_request,
    to_anthropic_tool_choice,
    to_anthropic_tools,
)
from agentloop.orchestration.llm.anthropic.stream import MessageStreamReader
from agentloop.orchestration.llm.base import BaseProcessor, UsageHook
from agentloop.orchestration.llm.loop_clients import LoopClients
from agentloop.orchestration.llm.request_guard import model_requests
from agentloop.orchestration.llm.stream_deltas import StreamedReplies, stream_reply
from agentloop.orchestration.settings import ModelSettings
from agentloop.orchestration.settings.provider import DEFAULT_ANTHROPIC_MODEL

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MODEL",
    "DEFAULT_TIMEOUT",
    "PLACEHOLDER_API_KEY",
    "AnthropicProcessor",
]

DEFAULT_MODEL = DEFAULT_ANTHROPIC_MODEL
DEFAULT_TIMEOUT = timedelta(seconds=60)
DEFAULT_MAX_RETRIES = 3
DEFAULT_MAX_TOKENS = 4096
DEFAULT_BASE_URL = "https://api.anthropic.com"
#: Sent when a local server speaking the Messages API needs no key: the SDK insists on one.
PLACEHOLDER_API_KEY = "not-needed"


class AnthropicProcessor(StreamedReplies, BaseProcessor):
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
        if not model:
            raise ValueError("model must be a non-empty model name")
        self.streams_replies(stream, stream_interval)
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
        if not seconds > 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        if isinstance(max_retries, bool) or max_retries < 0:
            raise ValueError(f"max_retries must be a non-negative integer, not {max_retries!r}")
        if isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, not {max_tokens!r}")
        resolved_url = base_url or DEFAULT_BASE_URL
        if not api_key:
            if resolved_url.rstrip("/") == DEFAULT_BASE_URL:
                raise ValueError("an Anthropic API key is required (pass api_key or set ANTHROPIC_API_KEY)")
            api_key = PLACEHOLDER_API_KEY
        self._model = model
        self._max_tokens = max_tokens
        self._timeout = timedelta(seconds=seconds)
        self.on_usage = on_usage
        # every value explicit: the SDK then reads none of its own ANTHROPIC_* variables
        options: dict[str, Any] = {
            "api_key": api_key,
            "base_url": resolved_url,
            "timeout": seconds,
            "max_retries": max_retries,
        }
        # one client per event loop (loop_clients.py): a connection belongs to the loop that opened it
        self._clients = LoopClients(AsyncAnthropic(**options), lambda: AsyncAnthropic(**options))
        self._owns_client = True
        self._api_key = api_key if api_key != PLACEHOLDER_API_KEY else None

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
    def model(self) -> str:
        """The model name sent with every request."""
        return self._model

    @property
    def base_url(self) -> str:
        """The server's base URL, e.g. ``https://api.anthropic.com/``."""
        return str(self._clients.first.base_url)

    @property
    def timeout(self) -> timedelta:
        """The per-attempt timeout."""
        return self._timeout

    @property
    def max_retries(self) -> int:
        """How many times a retryable failure is retried."""
        return int(self._clients.first.max_retries)

    @property
    def max_tokens(self) -> int:
        """The most tokens one reply may hold."""
        return self._max_tokens

    @property
    def client(self) -> AsyncAnthropic:
        """The SDK client of the running event loop (one per loop); outside a loop, the first one."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._clients.first
        return self._clients.current()

    def __repr__(self) -> str:
        return f"<AnthropicProcessor model={self._model!r} base_url={self.base_url!r}>"

    # the protocol

    async def process(self, request: ModelRequest) -> AiResponse:
        """One Messages API turn; every failure is returned as :meth:`AiResponse.failure`.

        Raises :class:`~agentloop.orchestration.llm.request_guard.ModelRequestsBlockedError`
        (a test set-up error, not a model fault) while tests block real model requests.
        """
        model_requests.check(url=self.base_url, sender="AnthropicProcessor")
        if request.files:
            logger.debug("anthropic processor: %d file(s) ignored (not supported yet)", len(request.files))
        try:
            system, messages = to_anthropic_request(
                instruction=request.instruction,
                history_messages=request.history_messages,
                documents=request.documents,
            )
            tools = to_anthropic_tools(request.tools)
            tool_choice = to_anthropic_tool_choice(request.tool_choices, tools)
            if request.tool_choices and len(request.tool_choices) > 1:
                chosen = {str(choice.get("name")) for choice in request.tool_choices}
                tools = [tool for tool in tools if tool["name"] in chosen]
        except (TypeError, ValueError) as error:
            return self._failure(f"invalid request: {error}")
        create: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "system": system if system else omit,
            "messages": messages,
            "tools": tools if tools else omit,
            "tool_choice": tool_choice if tool_choice is not None else omit,
        }
        response = await (self._streamed(create) if self._stream else self._whole(create))
        if isinstance(response, str):  # no reply: why
            return self._failure(response)
        await self._report_usage(response.usage)
        return response

    async def _whole(self, create: dict[str, Any]) -> AiResponse | str:
        """One message sent whole: the reply, or why there is none."""
        try:
            message = await self._clients.current().messages.create(**create)
        except Exception as error:  # the contract: a model fault is a value, never an exception
            reraise_interruption(error)
            return self._described(error)
        try:
            return from_message(message, default_model=self._model)
        except Exception as error:  # a malformed body the SDK let through
            reraise_interruption(error)
            logger.warning("anthropic processor: could not read the reply", exc_info=True)
            return f"unreadable response: {type(error).__name__}: {error}"

    async def _streamed(self, create: dict[str, Any]) -> AiResponse | str:
        """One message streamed (``anthropic/stream.py``), its pieces reported as ``delta`` events."""
        try:
            return await stream_reply(
                lambda: self._clients.current().messages.create(**create, stream=True),
                lambda reporter: MessageStreamReader(default_model=self._model, reporter=reporter),
                action=self._model,
                interval=self._stream_interval,
                retries=self.max_retries,
                broken=ANTHROPIC_ERRORS.broke_stream,
            )
        except ValueError as error:  # an event that is not JSON, or not an event
            logger.warning("anthropic processor: unreadable stream event", exc_info=True)
            return f"unreadable stream event: {type(error).__name__}: {error}"
        except Exception as error:  # the contract: a model fault is a value, never an exception
            reraise_interruption(error)
            return self._described(error, mid_stream=True)

    def sharing_clients(self) -> Self:
        """A processor like this one on the same per-loop clients; closing it leaves them open."""
        twin = copy.copy(self)
        twin._owns_client = False
        return twin

    async def aclose(self) -> None:
        """Close this loop's HTTP client (unless it is shared: :meth:`sharing_clients`)."""
        if self._owns_client:
            await self._clients.aclose(AsyncAnthropic.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # helpers

    def _described(self, error: Exception, *, mid_stream: bool = False) -> str:
        if isinstance(error, AnthropicError):
            return ANTHROPIC_ERRORS.describe(error, timeout=self._timeout)
        if mid_stream:  # the SDK passes a transport error met while reading a stream on as is
            return f"stream broken: {type(error).__name__}: {error}"
        logger.warning("anthropic processor: unexpected error", exc_info=True)
        return ANTHROPIC_ERRORS.describe(error, timeout=self._timeout)

    def _failure(self, message: str) -> AiResponse:
        text = ANTHROPIC_ERRORS.failure_message(message, api_key=self._api_key)
        logger.warning("anthropic processor: %s", text)
        return AiResponse.failure(text, model=self._model)

    async def _report_usage(self, usage: Usage) -> None:
        if self.on_usage is None:
            return
        try:
            await maybe_await(self.on_usage(usage))
        except Exception as error:  # accounting must not turn a good answer into a failure
            reraise_interruption(error)
            logger.warning("anthropic processor: on_usage hook failed", exc_info=True)

"""``OpenAIProcessor``: the model-processor protocol on the official ``openai`` SDK.

One :meth:`OpenAIProcessor.send_request` is one Chat Completions request
(``client.chat.completions.create``) against OpenAI or any OpenAI-compatible
server (``base_url``). The SDK does the transport work: it retries 408, 409,
429, 5xx, connection errors and timeouts ``max_retries`` times with
exponential backoff, honouring ``Retry-After``/``retry-after-ms``, and applies
``timeout`` to every attempt.

The processor never raises for a model fault. Every failure — an HTTP error
after the retries, a connection error, a timeout, a response with no choices,
a history message it cannot map, anything unexpected — comes back as
:meth:`AiResponse.failure` with a short message such as
``"openai: 429 rate limited after 4 attempts: slow down"``. Messages never
contain the API key (it is redacted if a server echoes it back).

Mapping, from the provider-neutral shapes of :mod:`agentloop.actions.model`:

- ``instruction`` becomes the system message; ``documents`` (each a ``str`` or
  ``{"title", "content"}``) are appended to it as reference documents, every
  piece embedded with :func:`agentloop.actions.embed_user_text`, so no document can end
  its element or pose as an instruction.
- ``history_messages`` (user/assistant/tool/system; assistant ``tool_calls``
  ``[{id, name, arguments}]``; tool ``tool_call_id``) become OpenAI messages.
- ``tools`` ``{"name", "description", "parameters"}`` become function tools;
  ``tool_choices=[{"name": n}]`` forces ``n``; several choices restrict the
  offered tools to those named and require a call; ``None`` (or empty) lets the
  model choose (``"auto"``). With no tools, neither ``tools`` nor
  ``tool_choice`` is sent.
- ``files`` are not sent yet (a debug line is logged); ``is_auto_handle_function_call``
  is accepted for the protocol but this processor never executes tools — every
  function call is returned to the caller.

The reply becomes an :class:`AiResponse`: ``text`` from the message content,
``function_calls`` with ``arguments`` exactly as the server sent them (even when
not JSON), ``usage`` from ``prompt_tokens``/``completion_tokens``, and
``model`` from the response.

With ``stream=True`` the same request is streamed (``stream_options.include_usage``) and read
back by :mod:`agentloop.orchestration.llm.openai.stream` into the same :class:`AiResponse`; while a run
listens, the partial text and tool arguments are reported as throttled ``delta`` progress
events (:mod:`agentloop.orchestration.llm.stream_deltas`). A failure mid-stream (a dropped connection, a
malformed chunk, an error event, a stream cut short) is a failure like any other; one cut short,
disconnected or stalled is read again first, up to ``max_retries`` times.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Self

from openai import AsyncOpenAI, OpenAIError, omit

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.model import AiResponse, ModelRequest, Usage
from agentloop.orchestration.interruptions import reraise_interruption
from agentloop.orchestration.llm.base import BaseProcessor, UsageHook
from agentloop.orchestration.llm.loop_clients import LoopClients
from agentloop.orchestration.llm.openai.errors import OPENAI_ERRORS
from agentloop.orchestration.llm.openai.mapping import (
    from_chat_completion,
    to_openai_messages,
    to_openai_tool_choice,
    to_openai_tools,
)
from agentloop.orchestration.llm.openai.stream import ChatStreamReader
from agentloop.orchestration.llm.request_guard import model_requests
from agentloop.orchestration.llm.stream_deltas import StreamedReplies, stream_reply
from agentloop.orchestration.settings import ModelSettings, load_settings

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MODEL",
    "DEFAULT_TIMEOUT",
    "PLACEHOLDER_API_KEY",
    "OpenAIProcessor",
]


DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_TIMEOUT = timedelta(seconds=60)
DEFAULT_MAX_RETRIES = 3
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Sent when a local OpenAI-compatible server needs no key: the SDK insists on one.
PLACEHOLDER_API_KEY = "not-needed"


class OpenAIProcessor(StreamedReplies, BaseProcessor):
    """A :class:`~agentloop.actions.model.ModelProcessor` backed by ``openai.AsyncOpenAI`` (Chat Completions).

    ``timeout`` (seconds or a ``timedelta``, default 60 s) bounds each attempt;
    ``max_retries`` (default 3) is how many times the SDK retries a retryable
    failure, so a request makes at most ``max_retries + 1`` attempts.
    ``base_url`` selects any OpenAI-compatible server (default: OpenAI's); with
    a non-default ``base_url`` the key may be omitted (a placeholder is sent).
    The processor keeps one SDK client per event loop (:mod:`~agentloop.orchestration.llm.loop_clients`),
    so one processor serves any number of ``asyncio.run`` calls and threads.
    Pass ``client`` to reuse an existing ``AsyncOpenAI`` (then ``api_key`` and
    ``base_url`` must not be given; ``timeout``/``max_retries`` override the
    client's own when given): it is used as it is on every loop, so its
    connections are its owner's to keep on one loop. ``on_usage`` is called with the usage of every
    completion the server returned, for accounting; its failures are logged,
    never raised. ``stream=True`` streams every reply and reports its partial
    output as ``delta`` events, at most one per ``stream_interval`` (seconds or a
    ``timedelta``, default 100 ms) for each piece of the reply; the result is the
    same as without streaming.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str = DEFAULT_MODEL,
        timeout: float | timedelta | None = None,
        max_retries: int | None = None,
        temperature: float | None = None,
        client: AsyncOpenAI | None = None,
        on_usage: UsageHook | None = None,
        stream: bool = False,
        stream_interval: float | timedelta | None = None,
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty model name")
        self.streams_replies(stream, stream_interval)
        timeout_seconds = _seconds(timeout) if timeout is not None else None
        if max_retries is not None and (isinstance(max_retries, bool) or max_retries < 0):
            raise ValueError(f"max_retries must be a non-negative integer, not {max_retries!r}")
        self._model = model
        self._temperature = temperature
        self.on_usage = on_usage
        if client is not None:
            if api_key is not None or base_url is not None:
                raise ValueError("pass either client or api_key/base_url, not both")
            if timeout_seconds is not None or max_retries is not None:
                client = client.with_options(
                    timeout=timeout_seconds if timeout_seconds is not None else client.timeout,
                    max_retries=max_retries if max_retries is not None else client.max_retries,
                )
            self._clients: LoopClients[AsyncOpenAI] = LoopClients(client, None)
            self._owns_client = False
        else:
            resolved_url = base_url or DEFAULT_BASE_URL
            if not api_key:
                if resolved_url.rstrip("/") == DEFAULT_BASE_URL:
                    raise ValueError("an OpenAI API key is required (pass api_key or set OPENAI_API_KEY)")
                api_key = PLACEHOLDER_API_KEY
            options: dict[str, Any] = {
                "api_key": api_key,
                "base_url": resolved_url,
                "timeout": DEFAULT_TIMEOUT.total_seconds() if timeout_seconds is None else timeout_seconds,
                "max_retries": max_retries if max_retries is not None else DEFAULT_MAX_RETRIES,
            }
            self._clients = LoopClients(AsyncOpenAI(**options), lambda: AsyncOpenAI(**options))
            self._owns_client = True
        self._api_key = self._clients.first.api_key

    @classmethod
    def from_settings(
        cls,
        settings: ModelSettings,
        *,
        temperature: float | None = None,
        on_usage: UsageHook | None = None,
    ) -> Self:
        """Build from the model settings: ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, the model
        (``AGENTLOOP_MODEL``, else ``OPENAI_MODEL``), ``OPENAI_TIMEOUT_SECONDS``, ``OPENAI_MAX_RETRIES``,
        ``AGENTLOOP_MODEL_STREAM`` and ``AGENTLOOP_MODEL_STREAM_INTERVAL_SECONDS``.

        Raises ``ValueError`` when there is no key and no ``OPENAI_BASE_URL`` (a
        local OpenAI-compatible server may need no key), or for a timeout that is not positive.
        """
        key = settings.openai_api_key
        return cls(
            api_key=key.get_secret_value() if key is not None else None,
            base_url=settings.openai_base_url,
            model=settings.provider.model_name or settings.openai_model,
            timeout=settings.openai_timeout_seconds,
            max_retries=settings.openai_max_retries,
            temperature=temperature,
            on_usage=on_usage,
            stream=settings.provider.stream,
            stream_interval=settings.provider.stream_interval_seconds,
        )

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        temperature: float | None = None,
        on_usage: UsageHook | None = None,
    ) -> Self:
        """:meth:`from_settings` with the settings of ``environ`` (default ``os.environ``).

        Raises ``ValueError`` for a malformed setting.
        """
        return cls.from_settings(load_settings(environ).model, temperature=temperature, on_usage=on_usage)

    # configuration, read-only

    @property
    def model(self) -> str:
        """The model name sent with every request."""
        return self._model

    @property
    def base_url(self) -> str:
        """The server's base URL, e.g. ``https://api.openai.com/v1/``."""
        return str(self._clients.first.base_url)

    @property
    def timeout(self) -> timedelta | None:
        """The per-attempt timeout (``None`` when the client has none)."""
        seconds = _timeout_seconds(self._clients.first.timeout)
        return timedelta(seconds=seconds) if seconds is not None else None

    @property
    def max_retries(self) -> int:
        """How many times a retryable failure is retried."""
        return int(self._clients.first.max_retries)

    @property
    def temperature(self) -> float | None:
        """The sampling temperature, or ``None`` for the server's default."""
        return self._temperature

    @property
    def client(self) -> AsyncOpenAI:
        """The SDK client of the running event loop (one per loop, see
        :mod:`~agentloop.orchestration.llm.loop_clients`); outside a loop, the one it was built with."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._clients.first
        return self._clients.current()

    def __repr__(self) -> str:
        return f"<OpenAIProcessor model={self._model!r} base_url={self.base_url!r}>"

    # the protocol

    async def process(self, request: ModelRequest) -> AiResponse:
        """One Chat Completions turn; every failure is returned as :meth:`AiResponse.failure`.

        ``files`` are not sent yet (logged at debug level). The processor never
        executes tools, whatever ``is_auto_handle_function_call`` says: function
        calls are returned in :attr:`AiResponse.function_calls`. Raises
        :class:`~agentloop.orchestration.llm.request_guard.ModelRequestsBlockedError` (a test
        set-up error, not a model fault) while tests block real model requests.
        """
        model_requests.check(url=self.base_url, sender="OpenAIProcessor")
        if request.files:
            logger.debug(
                "openai processor: %d file(s) ignored (files are not supported yet)", len(request.files)
            )
        if request.is_auto_handle_function_call:
            logger.debug("openai processor: function calls are returned, never executed here")
        try:
            messages = to_openai_messages(
                instruction=request.instruction,
                history_messages=request.history_messages,
                documents=request.documents,
            )
            openai_tools = to_openai_tools(request.tools)
            tool_choice = to_openai_tool_choice(request.tool_choices, openai_tools)
            if request.tool_choices and len(request.tool_choices) > 1:
                chosen = {str(choice.get("name")) for choice in request.tool_choices}
                openai_tools = [tool for tool in openai_tools if tool["function"]["name"] in chosen]
        except (TypeError, ValueError) as error:
            return self._failure(f"invalid request: {error}")

        create: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            "tools": openai_tools if openai_tools else omit,
            "tool_choice": tool_choice if tool_choice is not None else omit,
            "temperature": self._temperature if self._temperature is not None else omit,
        }
        response = await (self._streamed(create) if self._stream else self._whole(create))
        if isinstance(response, str):  # no reply: why
            return self._failure(response)
        await self._report_usage(response.usage)
        if response.has_error:
            logger.warning("openai processor: %s", response.error)
        return response

    async def _whole(self, create: dict[str, Any]) -> AiResponse | str:
        """One completion sent whole: the reply, or why there is none."""
        try:
            completion = await self._clients.current().chat.completions.create(**create)
        except Exception as error:  # the contract: a model fault is a value, never an exception
            reraise_interruption(error)
            return self._described(error)
        try:
            return from_chat_completion(completion, default_model=self._model)
        except Exception as error:  # a malformed body the SDK let through
            reraise_interruption(error)
            logger.warning("openai processor: could not read the completion", exc_info=True)
            return f"unreadable response: {type(error).__name__}: {error}"

    async def _streamed(self, create: dict[str, Any]) -> AiResponse | str:
        """One completion streamed (``openai/stream.py``), its pieces reported as ``delta`` events."""
        try:
            return await stream_reply(
                lambda: self._clients.current().chat.completions.create(
                    **create, stream=True, stream_options={"include_usage": True}
                ),
                lambda reporter: ChatStreamReader(default_model=self._model, reporter=reporter),
                action=self._model,
                interval=self._stream_interval,
                retries=self.max_retries,
                broken=OPENAI_ERRORS.broke_stream,
            )
        except ValueError as error:  # a chunk that is not JSON, or not a chunk
            logger.warning("openai processor: unreadable stream chunk", exc_info=True)
            return f"unreadable stream chunk: {type(error).__name__}: {error}"
        except Exception as error:  # the contract: a model fault is a value, never an exception
            reraise_interruption(error)
            return self._described(error)

    def sharing_clients(self) -> Self:
        """A processor like this one on the same per-loop clients; closing it leaves them open."""
        twin = copy.copy(self)
        twin._owns_client = False
        return twin

    async def aclose(self) -> None:
        """Close this loop's HTTP client, unless it was passed in (then its owner closes it)."""
        if self._owns_client:
            await self._clients.aclose(AsyncOpenAI.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # helpers

    def _described(self, error: Exception) -> str:
        if not isinstance(error, OpenAIError):
            logger.warning("openai processor: unexpected error", exc_info=True)
        return OPENAI_ERRORS.describe(error, timeout=self.timeout)

    def _failure(self, message: str) -> AiResponse:
        api_key = self._api_key if self._api_key != PLACEHOLDER_API_KEY else None
        text = OPENAI_ERRORS.failure_message(message, api_key=api_key)
        logger.warning("openai processor: %s", text)
        return AiResponse.failure(text, model=self._model)

    async def _report_usage(self, usage: Usage) -> None:
        if self.on_usage is None:
            return
        try:
            await maybe_await(self.on_usage(usage))
        except Exception as error:  # accounting must not turn a good answer into a failure
            reraise_interruption(error)
            logger.warning("openai processor: on_usage hook failed", exc_info=True)


def _seconds(timeout: float | timedelta) -> float:
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if not seconds > 0:
        raise ValueError(f"timeout must be positive, not {timeout!r}")
    return seconds


def _timeout_seconds(timeout: Any) -> float | None:
    if isinstance(timeout, int | float):
        return float(timeout)
    read = getattr(timeout, "read", None)  # an httpx Timeout
    return float(read) if isinstance(read, int | float) else None

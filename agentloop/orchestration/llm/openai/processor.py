"""``OpenAIProcessor``: the model-processor protocol on the official ``openai`` SDK.

One :meth:`OpenAIProcessor.send_request` is one Chat Completions request
(``client.chat.completions.create``) against OpenAI or any OpenAI-compatible
server (``base_url``). The SDK does the transport work: it retries 408, 409,
429, 5xx, connection errors and timeouts ``max_retries`` times with
exponential backoff, honouring ``Retry-After``/``retry-after-ms``, and applies
``timeout`` to every attempt.

What every SDK processor does alike (the per-loop clients, the request guard, the failures as
values, the usage hook, streaming) is :class:`~agentloop.orchestration.llm.sdk_processor.SdkProcessor`'s.
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

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Self

from openai import AsyncOpenAI, omit

from agentloop.actions.model import AiResponse, ModelRequest
from agentloop.orchestration.llm.base import UsageHook
from agentloop.orchestration.llm.openai.errors import OPENAI_ERRORS
from agentloop.orchestration.llm.openai.mapping import (
    from_chat_completion,
    to_openai_messages,
    to_openai_tool_choice,
    to_openai_tools,
)
from agentloop.orchestration.llm.openai.stream import ChatStreamReader
from agentloop.orchestration.llm.sdk_processor import SdkProcessor
from agentloop.orchestration.llm.stream_deltas import DeltaReporter
from agentloop.orchestration.llm.tool_shapes import offered_tools
from agentloop.orchestration.settings import ModelSettings, load_settings

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODEL", "OpenAIProcessor"]


DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIProcessor(SdkProcessor[AsyncOpenAI]):
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

    errors = OPENAI_ERRORS
    default_base_url = DEFAULT_BASE_URL
    missing_key = "an OpenAI API key is required (pass api_key or set OPENAI_API_KEY)"
    stream_piece = "chunk"

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
        seconds = self._configure(
            model=model,
            timeout=timeout,
            max_retries=max_retries,
            on_usage=on_usage,
            stream=stream,
            stream_interval=stream_interval,
        )
        self._temperature = temperature
        if client is None:
            self._own_clients(
                AsyncOpenAI, api_key=api_key, base_url=base_url, timeout=seconds, max_retries=max_retries
            )
            return
        if api_key is not None or base_url is not None:
            raise ValueError("pass either client or api_key/base_url, not both")
        if seconds is not None or max_retries is not None:
            client = client.with_options(
                timeout=seconds if seconds is not None else client.timeout,
                max_retries=max_retries if max_retries is not None else client.max_retries,
            )
        self._use_client(client)

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
    def temperature(self) -> float | None:
        """The sampling temperature, or ``None`` for the server's default."""
        return self._temperature

    # the wire

    def _request_body(self, request: ModelRequest) -> dict[str, Any]:
        messages = to_openai_messages(
            instruction=request.instruction,
            history_messages=request.history_messages,
            documents=request.documents,
        )
        tools = to_openai_tools(request.tools)
        tool_choice = to_openai_tool_choice(request.tool_choices, tools)
        tools = offered_tools(tools, request.tool_choices, lambda tool: tool["function"]["name"])
        return {
            "model": self._model,
            "messages": messages,
            "tools": tools if tools else omit,
            "tool_choice": tool_choice if tool_choice is not None else omit,
            "temperature": self._temperature if self._temperature is not None else omit,
        }

    async def _send(self, client: AsyncOpenAI, body: dict[str, Any]) -> Any:
        return await client.chat.completions.create(**body)

    async def _open_stream(self, client: AsyncOpenAI, body: dict[str, Any]) -> Any:
        return await client.chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}
        )

    def _read_reply(self, reply: Any) -> AiResponse:
        return from_chat_completion(reply, default_model=self._model)

    def _stream_reader(self, reporter: DeltaReporter | None) -> ChatStreamReader:
        return ChatStreamReader(default_model=self._model, reporter=reporter)

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

Mapping, from the provider-neutral shapes of :mod:`actions.model`:

- ``instruction`` becomes the system message; ``documents`` (each a ``str`` or
  ``{"title", "content"}``) are appended to it as reference documents, every
  piece embedded with :func:`actions.embed_user_text`, so no document can end
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
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Self

from openai import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AsyncOpenAI,
    OpenAIError,
    omit,
)

from actions.context import maybe_await
from actions.model import AiResponse, Usage
from orchestration.llm.openai_mapping import (
    from_chat_completion,
    render_documents,
    to_openai_messages,
    to_openai_tool_choice,
    to_openai_tools,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MODEL",
    "DEFAULT_TIMEOUT",
    "PLACEHOLDER_API_KEY",
    "OpenAIProcessor",
    "UsageHook",
    "from_chat_completion",
    "render_documents",
    "to_openai_messages",
    "to_openai_tool_choice",
    "to_openai_tools",
]


DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_TIMEOUT = timedelta(seconds=60)
DEFAULT_MAX_RETRIES = 3
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Sent when a local OpenAI-compatible server needs no key: the SDK insists on one.
PLACEHOLDER_API_KEY = "not-needed"

UsageHook = Callable[[Usage], Awaitable[None] | None]
"""Called with the token usage of every completion the server returned (``def`` or ``async def``)."""

_MAX_DETAIL = 200  # characters of a server's error message kept
_MAX_MESSAGE = 400  # characters of a whole failure message
_STATUS_LABELS = {
    400: "bad request",
    401: "authentication failed",
    403: "permission denied",
    404: "not found",
    408: "request timeout",
    409: "conflict",
    413: "request too large",
    422: "unprocessable request",
    429: "rate limited",
}
_BEARER = re.compile(r"(?i)\bbearer\s+\S+")
_SECRET_KEY = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")


class OpenAIProcessor:
    """A :class:`~actions.model.ModelProcessor` backed by ``openai.AsyncOpenAI`` (Chat Completions).

    ``timeout`` (seconds or a ``timedelta``, default 60 s) bounds each attempt;
    ``max_retries`` (default 3) is how many times the SDK retries a retryable
    failure, so a request makes at most ``max_retries + 1`` attempts.
    ``base_url`` selects any OpenAI-compatible server (default: OpenAI's); with
    a non-default ``base_url`` the key may be omitted (a placeholder is sent).
    Pass ``client`` to reuse an existing ``AsyncOpenAI`` (then ``api_key`` and
    ``base_url`` must not be given; ``timeout``/``max_retries`` override the
    client's own when given). ``on_usage`` is called with the usage of every
    completion the server returned, for accounting; its failures are logged,
    never raised.
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
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty model name")
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
            self._client = client
            self._owns_client = False
        else:
            resolved_url = base_url or DEFAULT_BASE_URL
            if not api_key:
                if resolved_url.rstrip("/") == DEFAULT_BASE_URL:
                    raise ValueError("an OpenAI API key is required (pass api_key or set OPENAI_API_KEY)")
                api_key = PLACEHOLDER_API_KEY
            self._client = AsyncOpenAI(
                api_key=api_key,
                base_url=resolved_url,
                timeout=timeout_seconds if timeout_seconds is not None else DEFAULT_TIMEOUT.total_seconds(),
                max_retries=max_retries if max_retries is not None else DEFAULT_MAX_RETRIES,
            )
            self._owns_client = True
        self._api_key = self._client.api_key

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        temperature: float | None = None,
        on_usage: UsageHook | None = None,
    ) -> Self:
        """Build from ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``OPENAI_MODEL`` (default
        ``gpt-4o-mini``), ``OPENAI_TIMEOUT_SECONDS`` (default 60) and ``OPENAI_MAX_RETRIES``
        (default 3). ``environ`` defaults to ``os.environ``; empty values count as unset.

        Raises ``ValueError`` for a malformed number, or when there is no key and no
        ``OPENAI_BASE_URL`` (a local OpenAI-compatible server may need no key).
        """
        env = os.environ if environ is None else environ

        def value(name: str) -> str | None:
            text = env.get(name, "").strip()
            return text or None

        timeout_text = value("OPENAI_TIMEOUT_SECONDS")
        retries_text = value("OPENAI_MAX_RETRIES")
        try:
            timeout = float(timeout_text) if timeout_text is not None else DEFAULT_TIMEOUT.total_seconds()
        except ValueError:
            raise ValueError(
                f"OPENAI_TIMEOUT_SECONDS must be a number of seconds, not {timeout_text!r}"
            ) from None
        try:
            max_retries = int(retries_text) if retries_text is not None else DEFAULT_MAX_RETRIES
            if max_retries < 0:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"OPENAI_MAX_RETRIES must be a non-negative integer, not {retries_text!r}"
            ) from None
        return cls(
            api_key=value("OPENAI_API_KEY"),
            base_url=value("OPENAI_BASE_URL"),
            model=value("OPENAI_MODEL") or DEFAULT_MODEL,
            timeout=timeout,
            max_retries=max_retries,
            temperature=temperature,
            on_usage=on_usage,
        )

    # configuration, read-only

    @property
    def model(self) -> str:
        """The model name sent with every request."""
        return self._model

    @property
    def base_url(self) -> str:
        """The server's base URL, e.g. ``https://api.openai.com/v1/``."""
        return str(self._client.base_url)

    @property
    def timeout(self) -> timedelta | None:
        """The per-attempt timeout (``None`` when the client has none)."""
        seconds = _timeout_seconds(self._client.timeout)
        return timedelta(seconds=seconds) if seconds is not None else None

    @property
    def max_retries(self) -> int:
        """How many times a retryable failure is retried."""
        return int(self._client.max_retries)

    @property
    def temperature(self) -> float | None:
        """The sampling temperature, or ``None`` for the server's default."""
        return self._temperature

    @property
    def client(self) -> AsyncOpenAI:
        """The underlying SDK client."""
        return self._client

    def __repr__(self) -> str:
        return f"<OpenAIProcessor model={self._model!r} base_url={self.base_url!r}>"

    # the protocol

    async def send_request(
        self,
        *,
        instruction: str,
        tools: Sequence[Mapping[str, Any]],
        tool_choices: Sequence[Mapping[str, Any]] | None,
        history_messages: Sequence[Mapping[str, Any]],
        documents: Sequence[Any],
        files: Sequence[Any],
        is_auto_handle_function_call: bool,
    ) -> AiResponse:
        """One Chat Completions turn; every failure is returned as :meth:`AiResponse.failure`.

        ``files`` are not sent yet (logged at debug level). The processor never
        executes tools, whatever ``is_auto_handle_function_call`` says: function
        calls are returned in :attr:`AiResponse.function_calls`.
        """
        if files:
            logger.debug("openai processor: %d file(s) ignored (files are not supported yet)", len(files))
        if is_auto_handle_function_call:
            logger.debug("openai processor: function calls are returned, never executed here")
        try:
            messages = to_openai_messages(
                instruction=instruction, history_messages=history_messages, documents=documents
            )
            openai_tools = to_openai_tools(tools)
            tool_choice = to_openai_tool_choice(tool_choices, openai_tools)
            if tool_choices and len(tool_choices) > 1:
                chosen = {str(choice.get("name")) for choice in tool_choices}
                openai_tools = [tool for tool in openai_tools if tool["function"]["name"] in chosen]
        except (TypeError, ValueError) as error:
            return self._failure(f"invalid request: {error}")

        try:
            completion = await self._client.chat.completions.create(
                model=self._model,
                messages=messages,
                tools=openai_tools if openai_tools else omit,
                tool_choice=tool_choice if tool_choice is not None else omit,
                temperature=self._temperature if self._temperature is not None else omit,
            )
        except APIStatusError as error:
            return self._failure(self._describe_status_error(error))
        except APITimeoutError as error:
            attempts = _attempts_text(_attempts(error.request))
            timeout = self.timeout
            limit = f" (timeout {timeout.total_seconds():g}s)" if timeout is not None else ""
            return self._failure(f"request timed out{attempts}{limit}")
        except APIConnectionError as error:
            cause = error.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else error.message
            return self._failure(f"connection error{_attempts_text(_attempts(error.request))}: {detail}")
        except APIResponseValidationError as error:
            return self._failure(f"invalid response: {error.message}")
        except OpenAIError as error:
            return self._failure(f"{type(error).__name__}: {error}")
        except Exception as error:  # the contract: a model fault is a value, never an exception
            logger.warning("openai processor: unexpected error", exc_info=True)
            return self._failure(f"unexpected {type(error).__name__}: {error}")

        try:
            response = from_chat_completion(completion, default_model=self._model)
        except Exception as error:  # a malformed body the SDK let through
            logger.warning("openai processor: could not read the completion", exc_info=True)
            return self._failure(f"unreadable response: {type(error).__name__}: {error}")
        await self._report_usage(response.usage)
        if response.has_error:
            logger.warning("openai processor: %s", response.error)
        return response

    async def aclose(self) -> None:
        """Close the HTTP client, unless it was passed in (then its owner closes it)."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # helpers

    def _failure(self, message: str) -> AiResponse:
        text = self._redact(f"openai: {' '.join(message.split())}")
        if len(text) > _MAX_MESSAGE:
            text = text[: _MAX_MESSAGE - 1] + "…"
        logger.warning("openai processor: %s", text)
        return AiResponse.failure(text, model=self._model)

    def _redact(self, text: str) -> str:
        if self._api_key and self._api_key != PLACEHOLDER_API_KEY:
            text = text.replace(self._api_key, "[redacted]")
        text = _BEARER.sub("Bearer [redacted]", text)
        return _SECRET_KEY.sub("sk-[redacted]", text)

    def _describe_status_error(self, error: APIStatusError) -> str:
        status = error.status_code
        label = _STATUS_LABELS.get(status) or ("server error" if status >= 500 else "HTTP error")
        attempts = _attempts_text(_attempts(error.response.request))
        detail = _error_detail(error)
        return f"{status} {label}{attempts}" + (f": {detail}" if detail else "")

    async def _report_usage(self, usage: Usage) -> None:
        if self.on_usage is None:
            return
        try:
            await maybe_await(self.on_usage(usage))
        except Exception:  # accounting must not turn a good answer into a failure
            logger.warning("openai processor: on_usage hook failed", exc_info=True)


# request mapping


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


def _attempts(request: Any) -> int | None:
    """Attempts made, from the SDK's ``x-stainless-retry-count`` header on the last request."""
    headers = getattr(request, "headers", None)
    try:
        return int(headers.get("x-stainless-retry-count")) + 1 if headers is not None else None
    except (TypeError, ValueError):
        return None


def _attempts_text(attempts: int | None) -> str:
    if attempts is None:
        return ""
    return f" after {attempts} attempt" + ("" if attempts == 1 else "s")


def _error_detail(error: APIStatusError) -> str:
    body = error.body
    detail: Any = None
    if isinstance(body, Mapping):
        detail = body.get("message")
    elif isinstance(body, str):
        detail = body
    text = " ".join(str(detail).split()) if detail else ""
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 1] + "…"

"""``SdkProcessor``: what the OpenAI and Anthropic processors do alike, on a provider's official SDK.

Both SDKs are generated alike: an async client with ``api_key``, ``base_url``, ``timeout``,
``max_retries`` and ``close()``, which retries 408, 409, 429, 5xx, connection errors and
timeouts ``max_retries`` times with exponential backoff (honouring ``retry-after``) and applies
``timeout`` to every attempt; and the same exception classes (:mod:`~agentloop.orchestration.llm.sdk_errors`).
So one base holds everything but the wire shapes:

- the settings: a non-empty model, a positive timeout, a non-negative ``max_retries``, a key that
  is required for the provider's own server and replaced by :data:`PLACEHOLDER_API_KEY` for any
  other (a local server needs none, the SDK insists on one), every value given to the SDK
  explicitly, so it reads none of its own environment variables;
- one SDK client per event loop (:mod:`~agentloop.orchestration.llm.loop_clients`), shared by
  :meth:`SdkProcessor.sharing_clients` and closed by :meth:`SdkProcessor.aclose` only by the
  processor that owns it;
- the turn (:meth:`SdkProcessor.process`): the request guard
  (:mod:`~agentloop.orchestration.llm.request_guard`) first, the request mapped (one that cannot
  be is the failure ``invalid request: ...``), sent whole or streamed through
  :func:`~agentloop.orchestration.llm.stream_deltas.stream_reply` (its pieces reported as
  ``delta`` events, a stream broken part-way read again), the usage handed to ``on_usage`` (its
  failures logged, never raised);
- every failure a value, never an exception: :meth:`AiResponse.failure` with the SDK's failure in
  one short line (``"openai: 429 rate limited after 4 attempts: slow down"``), secrets
  redacted, logged once. The span of each turn is :class:`~agentloop.orchestration.llm.base.BaseProcessor`'s.

A provider (``openai/processor.py``, ``anthropic/processor.py``) names its SDK's errors and
server and says how a request maps to its wire shapes, how it is sent whole or streamed, and how
a reply or a stream reads back. Its log lines go to its own module's logger.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.model import AiResponse, ModelRequest
from agentloop.actions.usage import Usage
from agentloop.orchestration.interruptions import reraise_interruption
from agentloop.orchestration.llm.base import BaseProcessor, UsageHook
from agentloop.orchestration.llm.loop_clients import LoopClients
from agentloop.orchestration.llm.request_guard import model_requests
from agentloop.orchestration.llm.sdk_errors import SdkErrors
from agentloop.orchestration.llm.stream_deltas import (
    DeltaReporter,
    StreamedReplies,
    StreamReader,
    StreamTally,
    stream_reply,
)

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
    "PLACEHOLDER_API_KEY",
    "SdkClient",
    "SdkProcessor",
]

DEFAULT_TIMEOUT = timedelta(seconds=60)
DEFAULT_MAX_RETRIES = 3
#: Sent when a server other than the provider's own needs no key: the SDKs insist on one.
PLACEHOLDER_API_KEY = "not-needed"


class SdkClient(Protocol):
    """What the processors read of an SDK's async client (``AsyncOpenAI``, ``AsyncAnthropic``)."""

    @property
    def api_key(self) -> str | None: ...

    @property
    def base_url(self) -> object: ...

    @property
    def timeout(self) -> object: ...

    @property
    def max_retries(self) -> int: ...

    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=SdkClient)


class SdkProcessor(StreamedReplies, BaseProcessor, Generic[ClientT]):
    """A :class:`~agentloop.actions.model.ModelProcessor` on an official SDK's async client (module doc).

    A subclass sets the class attributes and implements the five wire methods; its ``__init__``
    calls :meth:`_configure`, then :meth:`_own_clients` (or :meth:`_use_client` for a client
    passed in).
    """

    #: The SDK's exception classes; their ``provider`` begins every failure and log line.
    errors: ClassVar[SdkErrors]
    #: The provider's own server, the one for which a key is required.
    default_base_url: ClassVar[str]
    #: The error for a missing key, naming the variable that holds it.
    missing_key: ClassVar[str]
    #: What one piece of a stream is called in a failure (``chunk``, ``event``).
    stream_piece: ClassVar[str]

    _model: str
    _clients: LoopClients[ClientT]
    _owns_client: bool
    on_usage: UsageHook | None

    # building

    def _configure(
        self,
        *,
        model: str,
        timeout: float | timedelta | None,
        max_retries: int | None,
        on_usage: UsageHook | None,
        stream: bool,
        stream_interval: float | timedelta | None,
    ) -> float | None:
        """Check and keep the settings every SDK processor takes; the timeout in seconds (``None``:
        not given). Raises ``ValueError`` for an empty model, a timeout that is not positive, a
        negative ``max_retries`` or a negative ``stream_interval``."""
        if not model:
            raise ValueError("model must be a non-empty model name")
        self.streams_replies(stream, stream_interval)
        seconds = None
        if timeout is not None:
            seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
            if not seconds > 0:
                raise ValueError(f"timeout must be positive, not {timeout!r}")
        if max_retries is not None and (isinstance(max_retries, bool) or max_retries < 0):
            raise ValueError(f"max_retries must be a non-negative integer, not {max_retries!r}")
        self._model = model
        self.on_usage = on_usage
        return seconds

    def _own_clients(
        self,
        sdk_client: Callable[..., ClientT],
        *,
        api_key: str | None,
        base_url: str | None,
        timeout: float | None,
        max_retries: int | None,
    ) -> None:
        """Build the clients (one per event loop) this processor owns, with every value explicit: the
        SDK then reads none of its own environment variables. Raises ``ValueError`` without a key
        for the provider's own server."""
        resolved_url = base_url or self.default_base_url
        if not api_key:
            if resolved_url.rstrip("/") == self.default_base_url:
                raise ValueError(self.missing_key)
            api_key = PLACEHOLDER_API_KEY
        options: dict[str, Any] = {
            "api_key": api_key,
            "base_url": resolved_url,
            "timeout": DEFAULT_TIMEOUT.total_seconds() if timeout is None else timeout,
            "max_retries": DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
        }
        self._clients = LoopClients(sdk_client(**options), lambda: sdk_client(**options))
        self._owns_client = True

    def _use_client(self, client: ClientT) -> None:
        """Serve every loop with ``client``, which its owner passed in (and closes)."""
        self._clients = LoopClients(client, None)
        self._owns_client = False

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
        timeout: Any = self._clients.first.timeout
        seconds = (
            timeout if isinstance(timeout, int | float) else getattr(timeout, "read", None)
        )  # or a Timeout
        return timedelta(seconds=float(seconds)) if isinstance(seconds, int | float) else None

    @property
    def max_retries(self) -> int:
        """How many times a retryable failure is retried."""
        return int(self._clients.first.max_retries)

    @property
    def client(self) -> ClientT:
        """The SDK client of the running event loop (one per loop, see
        :mod:`~agentloop.orchestration.llm.loop_clients`); outside a loop, the one it was built with."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._clients.first
        return self._clients.current()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} model={self._model!r} base_url={self.base_url!r}>"

    # the protocol

    async def process(self, request: ModelRequest) -> AiResponse:
        """One turn; every failure is returned as :meth:`AiResponse.failure`.

        ``files`` are not sent yet (logged at debug level). The processor never executes tools,
        whatever ``is_auto_handle_function_call`` says: function calls are returned in
        :attr:`AiResponse.function_calls`. Raises
        :class:`~agentloop.orchestration.errors.ModelRequestsBlockedError` (a test set-up
        error, not a model fault) while tests block real model requests.
        """
        model_requests.check(url=self.base_url, sender=type(self).__name__)
        if request.files:
            self._log.debug(
                "%s: %d file(s) ignored (files are not supported yet)", self._name, len(request.files)
            )
        if request.is_auto_handle_function_call:
            self._log.debug("%s: function calls are returned, never executed here", self._name)
        try:
            body = self._request_body(request)
        except (TypeError, ValueError) as error:
            return self._failure(f"invalid request: {error}")
        tally = StreamTally()
        response = await (self._streamed(body, tally) if self._stream else self._whole(body))
        if isinstance(response, str):  # no reply: why (with what the tries of a broken stream cost)
            response = replace(self._failure(response), usage=tally.usage)
            await self._report_usage(response.usage)
            return response
        await self._report_usage(response.usage)
        if response.has_error:
            self._log.warning("%s: %s", self._name, response.error)
        return response

    async def _whole(self, body: dict[str, Any]) -> AiResponse | str:
        """One reply sent whole: the reply, or why there is none."""
        try:
            reply = await self._send(self._clients.current(), body)
        except Exception as error:  # the contract: a model fault is a value, never an exception
            reraise_interruption(error)
            return self._described(error)
        try:
            return self._read_reply(reply)
        except Exception as error:  # a malformed body the SDK let through
            reraise_interruption(error)
            self._log.warning("%s: could not read the reply", self._name, exc_info=True)
            return f"unreadable response: {type(error).__name__}: {error}"

    async def _streamed(self, body: dict[str, Any], tally: StreamTally) -> AiResponse | str:
        """One reply streamed, its pieces reported as ``delta`` events: the reply, or why there is none
        (the usage its tries reported left in ``tally``)."""
        try:
            return await stream_reply(
                lambda: self._open_stream(self._clients.current(), body),
                self._stream_reader,
                action=self._model,
                interval=self._stream_interval,
                retries=self.max_retries,
                broken=self.errors.broke_stream,
                tally=tally,
            )
        except ValueError as error:  # a piece that is not JSON, or not a piece of this stream
            self._log.warning("%s: unreadable stream %s", self._name, self.stream_piece, exc_info=True)
            return f"unreadable stream {self.stream_piece}: {type(error).__name__}: {error}"
        except Exception as error:  # the contract: a model fault is a value, never an exception
            reraise_interruption(error)
            return self._described(error, mid_stream=True, broke=tally.broke)

    # the wire, one provider's

    @abstractmethod
    def _request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The keywords of the SDK's create call for ``request`` (model included, stream not).
        Raises ``ValueError`` or ``TypeError`` for a request it cannot map."""

    @abstractmethod
    async def _send(self, client: ClientT, body: dict[str, Any]) -> Any:
        """The reply to ``body``, sent whole."""

    @abstractmethod
    async def _open_stream(self, client: ClientT, body: dict[str, Any]) -> Any:
        """The SDK's stream of the reply to ``body`` (an async iterable and context manager)."""

    @abstractmethod
    def _read_reply(self, reply: Any) -> AiResponse:
        """What :meth:`_send` returned, as an :class:`AiResponse`."""

    @abstractmethod
    def _stream_reader(self, reporter: DeltaReporter | None) -> StreamReader[Any]:
        """A reader for one streamed reply, handing its pieces to ``reporter``."""

    # the clients

    def sharing_clients(self) -> Self:
        """A processor like this one on the same per-loop clients; closing it leaves them open."""
        twin = copy.copy(self)
        twin._owns_client = False
        return twin

    async def aclose(self) -> None:
        """Close this loop's HTTP client, unless it is not this processor's: passed in (its owner
        closes it) or shared (:meth:`sharing_clients`)."""
        if self._owns_client:
            await self._clients.aclose(lambda client: client.close())

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # helpers

    @property
    def _log(self) -> logging.Logger:
        """The logger of the provider's module (``agentloop.orchestration.llm.openai.processor``)."""
        return logging.getLogger(type(self).__module__)

    @property
    def provider_name(self) -> str:
        """The SDK's provider (``openai``, ``anthropic``), as metrics label its calls."""
        return self.errors.provider

    @property
    def _name(self) -> str:
        """How log lines name the processor: ``openai processor``."""
        return f"{self.errors.provider} processor"

    def _described(self, error: Exception, *, mid_stream: bool = False, broke: bool = False) -> str:
        """Why a call has no reply; ``mid_stream``: the error came out of reading a stream,
        ``broke``: it broke one that had opened (a dropped connection reads "stream broken",
        however the SDK wrapped it)."""
        dropped = isinstance(error, self.errors.connection) and not isinstance(error, self.errors.timeout)
        if broke and dropped:
            cause = error.__cause__ or error  # the SDK wrapped the transport error that broke it
            return f"stream broken: {type(cause).__name__}: {cause}"
        if isinstance(error, self.errors.base):
            return self.errors.describe(error, timeout=self.timeout)
        if mid_stream:  # the SDK passes a transport error met while reading a stream on as is
            return f"stream broken: {type(error).__name__}: {error}"
        self._log.warning("%s: unexpected error", self._name, exc_info=True)
        return self.errors.describe(error, timeout=self.timeout)

    def _failure(self, message: str) -> AiResponse:
        api_key = self._clients.first.api_key
        text = self.errors.failure_message(
            message, api_key=api_key if api_key != PLACEHOLDER_API_KEY else None
        )
        self._log.warning("%s: %s", self._name, text)
        return AiResponse.failure(text, model=self._model)

    async def _report_usage(self, usage: Usage) -> None:
        if self.on_usage is None:
            return
        try:
            await maybe_await(self.on_usage(usage))
        except Exception as error:  # accounting must not turn a good answer into a failure
            reraise_interruption(error)
            self._log.warning("%s: on_usage hook failed", self._name, exc_info=True)

"""``RecordSearchGenerator``: builds the agent's ``context`` and runs the loop in-process.

Two entry points, as a chat app needs them:

- :meth:`RecordSearchGenerator.generate` — the chat flow: the intent gate
  (:class:`ClassifySearchIntentAction`, run on its own) decides first, and
  ordinary conversation gets ``None`` so the caller answers it some other way;
- :meth:`RecordSearchGenerator.generate_for_explicit_search` — the user asked
  for a search explicitly: no gate, no history, and each phase of the
  procedure streams through ``notify_progress``.

Both run :class:`RecordSearchAgentLoop` on the :class:`~loops.InlineAgentRunner`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Self

from agentloop import InlineAgentRunner, ModelProcessor, StandardContextFactory
from agentloop.examples.record_search.actions import ClassifySearchIntentAction
from agentloop.examples.record_search.context import NotifyProgress, RecordSearchContext
from agentloop.examples.record_search.loop import RecordSearchAgentLoop, model_name
from agentloop.examples.record_search.offline import create_offline_model
from agentloop.examples.record_search.resources import RecordSearchResources, open_resources


def default_processor(environ: Mapping[str, str] | None = None) -> ModelProcessor:
    """The model the environment asks for (:func:`agentloop.processor_from_env`: OpenAI
    or a compatible server, rate-limited when configured); offline, with this agent's responders."""
    from agentloop import processor_from_env

    processor: ModelProcessor = processor_from_env(environ, offline=create_offline_model)
    return processor


@functools.cache
def shared_context_factory() -> StandardContextFactory:
    """The process's standard context factory, with this agent's offline model: every context the
    worker builds takes its processor from its one model provider, so they share one rate limiter
    (and its Redis pool)."""
    return StandardContextFactory(offline=create_offline_model)


class RecordSearchGenerator:
    """Holds the base context; each call derives the context of one request from it."""

    def __init__(
        self,
        *,
        context: RecordSearchContext,
        resources: RecordSearchResources | None = None,
        owns_processor: bool = False,
    ) -> None:
        self.context = context
        self._resources = resources
        self._owns_processor = owns_processor

    @classmethod
    def create(cls, *, context: RecordSearchContext) -> Self:
        """A generator over an assembled context (the caller owns its services)."""
        return cls(context=context)

    @classmethod
    def create_with_defaults(
        cls, *, database_url: str | None = None, processor: ModelProcessor | None = None
    ) -> Self:
        """Wire the concrete services: the database at ``database_url`` (default ``DATABASE_URL`` or
        the framework's SQLite file) with the sample records and the ``AiTool`` rows, the search
        service, the catalog, and ``processor`` (default :func:`default_processor`).

        The generator owns what it opened: :meth:`aclose` releases it.
        """
        resources = open_resources(database_url)
        try:
            context = RecordSearchContext(
                processor=processor if processor is not None else default_processor(),
                record_search_service=resources.service,
                tool_store=resources.tool_store,
                searchable_categories=resources.searchable_categories,
            )
        except BaseException:
            resources.dispose()
            raise
        return cls(context=context, resources=resources, owns_processor=processor is None)

    @property
    def model_name(self) -> str:
        return model_name(self.context.processor)

    @property
    def resources(self) -> RecordSearchResources | None:
        """What :meth:`create_with_defaults` opened (``None`` for :meth:`create`)."""
        return self._resources

    async def classify(
        self, *, message: str, history_messages: Sequence[Mapping[str, Any]] = ()
    ) -> dict[str, Any] | None:
        """The intent gate alone: ``{"is_search", "reason"}``, or ``None`` when the model failed."""
        context = replace(self.context, message=message, history_messages=tuple(history_messages))
        verdict: dict[str, Any] | None = await ClassifySearchIntentAction.create().run(
            arguments={"message": message, "searchable_categories": context.searchable_categories},
            context=context,
        )
        return verdict

    async def generate(
        self, *, message: str, history_messages: Sequence[Mapping[str, Any]] = ()
    ) -> dict[str, Any] | None:
        """The chat flow: the loop's result for a search request, ``None`` for anything else.

        A gate that fails (the model errs or answers nonsense) also gives ``None``:
        the chat then answers as it would any message, rather than searching blindly.
        """
        verdict = await self.classify(message=message, history_messages=history_messages)
        if verdict is None or not verdict["is_search"]:
            return None
        context = replace(self.context, message=message, history_messages=tuple(history_messages))
        return await self._run(context=context, message=message)

    async def generate_for_explicit_search(
        self, *, message: str, notify_progress: NotifyProgress | None = None
    ) -> dict[str, Any]:
        """The explicit flow: no gate, empty history, phases streamed to ``notify_progress``."""
        context = replace(
            self.context,
            message=message,
            history_messages=(),
            documents=(),
            files=(),
            notify_progress=notify_progress,
        )
        return await self._run(context=context, message=message)

    async def _run(self, *, context: RecordSearchContext, message: str) -> dict[str, Any]:
        runner = InlineAgentRunner.create(runnable=RecordSearchAgentLoop, context=context)
        result: dict[str, Any] = await runner.request(input={"message": message})
        return result

    async def aclose(self) -> None:
        """Release what :meth:`create_with_defaults` opened (a processor passed in stays open)."""
        close = getattr(self.context.processor, "aclose", None)
        if self._owns_processor and close is not None:
            self._owns_processor = False
            await close()
        if self._resources is not None:
            self._resources.dispose()
            self._resources = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

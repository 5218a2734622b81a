"""``RecordSearchContext``: everything the loop and its actions read, in one place.

The agent's dependency contract: the framework's :class:`~agentloop.StandardContext`
(processor, tool store, run store, history, documents, files), extended with
the search service, the catalog and the ids of the agent's tools. The loop and
the actions only read these slots (through :func:`agentloop.actions.context_value`), so
any object with the same attributes — or a plain dict with the same keys —
works as well.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentloop import StandardContext
from agentloop.examples.record_search.catalog import SEARCHABLE_CATEGORIES, SearchableCategory
from agentloop.examples.record_search.tools import (
    CLASSIFY_INTENT_TOOL_ID,
    COMPOSE_ANSWER_TOOL_ID,
    PLAN_SEARCH_TOOL_ID,
)

#: ``notify_progress(*, phase, status, message="", **data)``, plain or async.
NotifyProgress = Callable[..., Awaitable[None] | None]


@dataclass(frozen=True, kw_only=True)
class RecordSearchContext(StandardContext):
    """The record-search agent's ``context``: a :class:`~agentloop.StandardContext` and more.

    ``record_search_service`` answers ``search(*, plan, limit)`` (see
    :class:`agentloop.examples.record_search.service.RecordSearchService`); ``tool_store``
    answers ``get_payload(tool_id)``. ``message`` is a fallback for a loop input
    that carries none; ``notify_progress`` is set only by callers that stream.
    """

    record_search_service: Any
    searchable_categories: tuple[SearchableCategory, ...] = SEARCHABLE_CATEGORIES
    classify_intent_tool_id: str = CLASSIFY_INTENT_TOOL_ID
    plan_search_tool_id: str = PLAN_SEARCH_TOOL_ID
    compose_answer_tool_id: str = COMPOSE_ANSWER_TOOL_ID
    message: str | None = None
    notify_progress: NotifyProgress | None = None

"""``ExecuteSearchPlanAction``: no model — run the plan through the search service."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from agentloop import BaseAgentAction, context_value, maybe_await
from agentloop.examples.record_search.actions.base import searchable_categories
from agentloop.examples.record_search.catalog import find_category
from agentloop.examples.record_search.plan import validate_plan
from agentloop.examples.record_search.result import SearchResult


class ExecuteSearchPlanAction(BaseAgentAction):
    """Runs ``arguments["plan"]`` on ``context.record_search_service``.

    The plan is validated once more against the catalog (it may come from
    anywhere, not only from :class:`PlanSearchAction`). Returns JSON::

        {"category_id", "records": [...], "found_count", "shown_count",
         "is_truncated", "limit", "note"}

    where ``note`` says when the list was cut at the limit. An invalid plan or
    a missing service is a programming error and raises ``ValueError``; a
    database failure propagates (it is not a model fault).
    """

    name = "execute_search_plan"
    description = "Run the search plan's steps over the records and collect the result"

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"plan": {"type": "object", "description": "A validated search plan."}},
            "required": ["plan"],
            "additionalProperties": False,
        }

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        categories = searchable_categories(arguments=arguments, context=context)
        plan = validate_plan(arguments.get("plan"), categories)
        if plan is None:
            raise ValueError("execute_search_plan needs a plan that the catalog allows")
        service = context_value(context, "record_search_service")
        if service is None:
            raise ValueError("context has no record_search_service")
        found = await asyncio.to_thread(functools.partial(service.search, plan=plan))
        result: SearchResult = await maybe_await(found)
        category = find_category(categories, result.category_id)
        noun = category.count_phrase(result.found_count) if category else f"{result.found_count} records"
        note = (
            f"Showing the first {len(result.records)} of {noun}; the rest were left out."
            if result.is_truncated
            else ""
        )
        return {**result.to_dict(), "shown_count": len(result.records), "note": note}

"""``PlanSearchAction``: one forced call turning the request into a search plan."""

from __future__ import annotations

from typing import Any

from agentloop import ModelFailure, embed_user_text
from agentloop.examples.record_search.actions.base import USER_TEXT_RULE, BaseRecordSearchAction
from agentloop.examples.record_search.catalog import OPERATORS
from agentloop.examples.record_search.plan import (
    MAX_FILTERS_PER_STEP,
    MAX_LIMIT,
    MAX_PLAN_STEPS,
    validate_plan,
)

#: The key of the value :class:`PlanSearchAction` returns when the model was unavailable.
MODEL_UNAVAILABLE = "model_unavailable"


class PlanSearchAction(BaseRecordSearchAction):
    """The plan in normal form (see :mod:`agentloop.examples.record_search.plan`), or ``None``.

    Arguments: ``message`` (default ``context.message``) and optionally
    ``searchable_categories`` (default ``context.searchable_categories``).
    Whatever the model sends is re-validated against that catalog in
    :meth:`normalize`: one unknown id, field, operator or relation, one value
    of the wrong type, or too many steps, and the plan is ``None`` (a fallback:
    the run degrades). An empty ``steps`` list is an answer, not a fallback: the
    model says nothing in the catalog fits, and the plan is ``{"steps": []}``. When the
    model could not be asked at all (an error after the processor's retries, a
    reply without the forced call, arguments that are not a JSON object) the
    value is ``{"model_unavailable": reason}`` instead, and the run degrades.
    """

    name = "plan_search"
    description = "Decompose the request into ordered record-search steps"
    tool_name = "plan_record_search"
    tool_id_key = "plan_search_tool_id"

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        categories = self.searchable_categories(arguments=arguments, context=context)
        message = self.user_message(arguments=arguments, context=context)
        operators = ", ".join(f"{op} ({'/'.join(sorted(types))})" for op, types in OPERATORS.items())
        return "\n".join(
            [
                "You plan searches over business records. Call plan_record_search with the steps that "
                "find exactly what the user asks for.",
                "",
                "Searchable categories (ids, typed fields, relations):",
                self.render_catalog(categories=categories),
                "",
                "Rules:",
                "- The first step has a category_id from the catalog and optional filters on its fields.",
                "- Each later step has follow: a relation name of the previous step's category, and "
                "optional filters on the fields of the relation's target category.",
                "- The records of the last step's category are the answer; start from the category the "
                "conditions are about, then follow relations to the category the user wants.",
                f"- At most {MAX_PLAN_STEPS} steps and {MAX_FILTERS_PER_STEP} filters per step.",
                f"- Operators and the field types they apply to: {operators}.",
                "- Values: strings for string fields (use a listed value when the field has values), "
                "numbers for integer/number fields, YYYY-MM-DD for dates.",
                f"- limit (optional, 1..{MAX_LIMIT}) is how many records to show.",
                "- If the request cannot be expressed with this catalog, return an empty steps list.",
                USER_TEXT_RULE,
                "",
                embed_user_text("user_request", message),
            ]
        )

    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        if parsed.get("steps") == []:
            return {"steps": []}  # the model's answer: the request is not a search of this catalog
        return validate_plan(parsed, self.searchable_categories(arguments=arguments, context=context))

    def fallback_when_unavailable(
        self, *, arguments: dict[str, Any], context: Any, failure: ModelFailure
    ) -> Any:
        return {MODEL_UNAVAILABLE: failure.reason}

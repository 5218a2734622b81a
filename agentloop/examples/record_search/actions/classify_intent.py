"""``ClassifySearchIntentAction``: the intent gate, run on its own before the loop."""

from __future__ import annotations

from typing import Any

from agentloop import embed_user_text
from agentloop.examples.record_search.actions.base import USER_TEXT_RULE, BaseRecordSearchAction

MAX_REASON_LENGTH = 500


class ClassifySearchIntentAction(BaseRecordSearchAction):
    """Is the message a record search? ``{"is_search": bool, "reason": str}``, or ``None``.

    Arguments: ``message`` (default ``context.message``) and optionally
    ``searchable_categories``. Not in the loop's registry: the generator's chat
    flow runs it first and starts the loop only for a search.
    """

    name = "classify_search_intent"
    description = "Decide whether a chat message asks for a record search"
    tool_name = "classify_search_intent"
    tool_id_key = "classify_intent_tool_id"

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        categories = self.searchable_categories(arguments=arguments, context=context)
        message = self.user_message(arguments=arguments, context=context)
        return "\n".join(
            [
                "You are the intent gate of an assistant that searches business records.",
                "The records it can search:",
                self.render_category_overview(categories=categories),
                "",
                "Call classify_search_intent with is_search=true when the user's latest message asks to "
                "find, list, show or count such records (possibly with conditions), and is_search=false "
                "for greetings, thanks, small talk or questions about anything else.",
                USER_TEXT_RULE,
                "",
                embed_user_text("user_request", message),
            ]
        )

    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        is_search = parsed.get("is_search")
        reason = parsed.get("reason", "")
        if not isinstance(is_search, bool) or not isinstance(reason, str):
            return None
        return {"is_search": is_search, "reason": reason.strip()[:MAX_REASON_LENGTH]}

"""The tool schemas of the agent's three model steps, and the ids they are stored under.

These payloads are *data*: :func:`agentloop.examples.record_search.sample_data.load_tools`
writes them to the ``AiTool`` table, and each action loads its schema from
there by the id it reads from ``context`` — rewording a tool is a data change.
The catalog (category ids, fields, relations) is not in the schemas: it goes
into the instruction, so a catalog change needs no tool change.
"""

from __future__ import annotations

from typing import Any

from agentloop.examples.record_search.catalog import OPERATORS
from agentloop.examples.record_search.plan import MAX_FILTERS_PER_STEP, MAX_LIMIT, MAX_PLAN_STEPS

CLASSIFY_INTENT_TOOL_ID = "record_search.classify_intent"
PLAN_SEARCH_TOOL_ID = "record_search.plan"
COMPOSE_ANSWER_TOOL_ID = "record_search.compose"

CLASSIFY_INTENT_TOOL: dict[str, Any] = {
    "name": "classify_search_intent",
    "description": (
        "Decide whether the user's latest message asks to find, list or count records "
        "in the searchable categories, or is ordinary conversation."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "is_search": {
                "type": "boolean",
                "description": "True when the message asks for a record search.",
            },
            "reason": {"type": "string", "description": "One short sentence explaining the decision."},
        },
        "required": ["is_search", "reason"],
        "additionalProperties": False,
    },
}

_FILTER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "field": {"type": "string", "description": "A field of the step's category."},
        "op": {"type": "string", "enum": list(OPERATORS)},
        "value": {
            "type": ["string", "number"],
            "description": "A string, a number, or a date as YYYY-MM-DD.",
        },
    },
    "required": ["field", "op", "value"],
    "additionalProperties": False,
}

PLAN_SEARCH_TOOL: dict[str, Any] = {
    "name": "plan_record_search",
    "description": (
        "Turn the request into ordered record-search steps. The first step names a category id "
        "and filters it; each later step follows a relation of the previous step's category "
        "(and may filter the records it reaches). The last step's category is what the user gets."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_PLAN_STEPS,
                "items": {
                    "type": "object",
                    "properties": {
                        "category_id": {"type": "string", "description": "First step only: a category id."},
                        "follow": {
                            "type": "string",
                            "description": "Later steps only: a relation name of the previous category.",
                        },
                        "filters": {
                            "type": "array",
                            "maxItems": MAX_FILTERS_PER_STEP,
                            "items": _FILTER_SCHEMA,
                        },
                    },
                    "additionalProperties": False,
                },
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "description": "How many records to show at most.",
            },
        },
        "required": ["steps"],
        "additionalProperties": False,
    },
}

COMPOSE_ANSWER_TOOL: dict[str, Any] = {
    "name": "compose_answer",
    "description": "Write the reply to the user from the summary of the search result.",
    "parameters": {
        "type": "object",
        "properties": {
            "message": {
                "type": "string",
                "description": "The reply: what was found, how many, and whether the list is cut short.",
            },
        },
        "required": ["message"],
        "additionalProperties": False,
    },
}

#: Every tool the agent loads, by the id it is stored under.
TOOL_PAYLOADS: dict[str, dict[str, Any]] = {
    CLASSIFY_INTENT_TOOL_ID: CLASSIFY_INTENT_TOOL,
    PLAN_SEARCH_TOOL_ID: PLAN_SEARCH_TOOL,
    COMPOSE_ANSWER_TOOL_ID: COMPOSE_ANSWER_TOOL,
}

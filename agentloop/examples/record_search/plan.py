"""A search plan, and the code that re-validates one against the catalog.

A plan is ordered steps: the first names a category and filters it; each later
step follows a relation from the previous step's category (and may filter the
records it reaches)::

    {"steps": [{"category_id": "companies",
                "filters": [{"field": "country", "op": "eq", "value": "Germany"}]},
               {"follow": "contacts",
                "filters": [{"field": "role", "op": "contains", "value": "CTO"}]}],
     "limit": 20}

:func:`validate_plan` accepts only what the catalog allows and returns the plan
in a normal form (the same shape, every key present, enumerated values in their
catalog spelling); anything else — an unknown category, field, operator or
relation, a value of the wrong type, too many steps or filters, an unexpected
key — makes it ``None``. Validating a normal form gives it back unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from agentloop.examples.record_search.catalog import (
    OPERATORS,
    CategoryField,
    SearchableCategory,
    find_category,
)

MAX_PLAN_STEPS = 3
MAX_FILTERS_PER_STEP = 5
MAX_LIMIT = 50
DEFAULT_LIMIT = 20
MAX_STRING_VALUE = 200
_MAX_ABS_NUMBER = 1e15

_PLAN_KEYS = frozenset({"steps", "limit"})
_FIRST_STEP_KEYS = frozenset({"category_id", "filters"})
_FOLLOW_STEP_KEYS = frozenset({"follow", "filters"})
_FILTER_KEYS = frozenset({"field", "op", "value"})


def validate_plan(
    raw: object,
    categories: Sequence[SearchableCategory],
    *,
    max_steps: int = MAX_PLAN_STEPS,
    max_limit: int = MAX_LIMIT,
    default_limit: int = DEFAULT_LIMIT,
) -> dict[str, Any] | None:
    """``raw`` in normal form when the catalog allows every part of it, else ``None``.

    A ``limit`` above ``max_limit`` is lowered to it; a missing one becomes
    ``default_limit``; one below 1 (or not an integer) rejects the plan.
    """
    if not isinstance(raw, Mapping) or not set(raw) <= _PLAN_KEYS:
        return None
    steps = raw.get("steps")
    if not isinstance(steps, list) or not 1 <= len(steps) <= max_steps:
        return None
    limit = _validate_limit(raw.get("limit"), max_limit=max_limit, default_limit=default_limit)
    if limit is None:
        return None
    normalized: list[dict[str, Any]] = []
    current: SearchableCategory | None = None
    for index, step in enumerate(steps):
        if not isinstance(step, Mapping):
            return None
        if index == 0:
            if not set(step) <= _FIRST_STEP_KEYS:
                return None
            current = find_category(categories, step.get("category_id"))
            if current is None:
                return None
            head: dict[str, Any] = {"category_id": current.id}
        else:
            assert current is not None
            if not set(step) <= _FOLLOW_STEP_KEYS:
                return None
            relation_name = step.get("follow")
            relation = current.relation(relation_name) if isinstance(relation_name, str) else None
            if relation is None:
                return None
            current = find_category(categories, relation.target)
            if current is None:
                return None
            head = {"follow": relation.name}
        filters = _validate_filters(step.get("filters", []), current)
        if filters is None:
            return None
        normalized.append({**head, "filters": filters})
    return {"steps": normalized, "limit": limit}


def step_categories(
    plan: Mapping[str, Any], categories: Sequence[SearchableCategory]
) -> list[SearchableCategory]:
    """The category each step of a normal-form plan works on (``ValueError`` if it does not resolve)."""
    resolved: list[SearchableCategory] = []
    for index, step in enumerate(plan["steps"]):
        if index == 0:
            category = find_category(categories, step["category_id"])
        else:
            relation = resolved[-1].relation(step["follow"])
            category = find_category(categories, relation.target) if relation is not None else None
        if category is None:
            raise ValueError(f"step {index} of the plan does not resolve against the catalog")
        resolved.append(category)
    return resolved


def _validate_limit(value: object, *, max_limit: int, default_limit: int) -> int | None:
    if value is None:
        return default_limit
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return min(value, max_limit)


def _validate_filters(filters: object, category: SearchableCategory) -> list[dict[str, Any]] | None:
    if not isinstance(filters, list) or len(filters) > MAX_FILTERS_PER_STEP:
        return None
    normalized: list[dict[str, Any]] = []
    for item in filters:
        if not isinstance(item, Mapping) or set(item) != _FILTER_KEYS:
            return None
        field = category.field(item["field"]) if isinstance(item["field"], str) else None
        op = item["op"]
        if field is None or not isinstance(op, str) or field.type not in OPERATORS.get(op, ()):
            return None
        value = validate_value(field, op, item["value"])
        if value is None:
            return None
        normalized.append({"field": field.name, "op": op, "value": value})
    return normalized


def validate_value(field: CategoryField, op: str, value: object) -> str | int | float | None:
    """``value`` when it fits ``field`` under ``op`` (normalized), else ``None``."""
    if field.type == "string":
        if not isinstance(value, str):
            return None
        text = value.strip()
        if not text or len(text) > MAX_STRING_VALUE:
            return None
        if field.values and op == "eq":
            return next((known for known in field.values if known.casefold() == text.casefold()), None)
        return text
    if field.type == "date":
        if not isinstance(value, str):
            return None
        try:
            return date.fromisoformat(value.strip()).isoformat()
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or field.type == "integer"):
        return None
    if abs(value) > _MAX_ABS_NUMBER:
        return None
    return value

"""JSON Schemas from Python types (pydantic), shaped for a model's tool parameters.

:func:`tool_schema` asks pydantic for a type's JSON Schema and makes it the
plain object schema both processors send as a tool's ``parameters``
(OpenAI's ``function.parameters``, Anthropic's ``input_schema``):

- every ``$ref`` into ``$defs`` is inlined, so the schema reads top to bottom
  and tools that cannot follow references (the offline model, some
  OpenAI-compatible servers) see every field; only a recursive type keeps its
  ``$defs`` for the references that cannot be inlined;
- pydantic's generated ``title`` keys are dropped (they repeat the field names
  and cost tokens); a *property* called ``title`` stays;
- the top-level ``description`` (the type's docstring) is lifted out: it
  becomes the tool's description (:func:`schema_description`).

The type must describe a JSON object: a pydantic model, a dataclass or a
``TypedDict``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, TypeAdapter

_DEFS_PREFIX = "#/$defs/"
#: Keywords whose value is one schema.
_ONE_SCHEMA = frozenset(
    {"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames"}
)
#: Keywords whose value is a list of schemas.
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
#: Keywords whose value maps names to schemas.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs"})


@functools.cache
def type_adapter(python_type: Any) -> TypeAdapter[Any]:
    """The (cached) pydantic adapter that validates and describes ``python_type``."""
    return TypeAdapter(python_type)


def tool_schema(python_type: Any) -> dict[str, Any]:
    """``python_type``'s JSON Schema as a tool's ``parameters`` (see the module doc).

    Raises ``TypeError`` when the type does not describe a JSON object.
    """
    schema = copy.deepcopy(type_adapter(python_type).json_schema())
    if schema.get("type") != "object":
        raise TypeError(
            f"{python_type!r} does not describe a JSON object (a pydantic model, a dataclass or a TypedDict)"
        )
    definitions = schema.pop("$defs", {})
    kept: set[str] = set()
    resolved = _inline(schema, definitions, frozenset(), kept)
    resolved.pop("description", None)
    if kept:
        resolved["$defs"] = _kept_definitions(definitions, kept)
    untitled: dict[str, Any] = _untitled(resolved)
    return untitled


def schema_description(python_type: Any) -> str:
    """The type's own description (a model's docstring), or ``""``."""
    description = type_adapter(python_type).json_schema().get("description", "")
    return description.strip() if isinstance(description, str) else ""


def _inline(node: Any, definitions: Mapping[str, Any], stack: frozenset[str], kept: set[str]) -> Any:
    """``node`` with each ``$ref`` into ``definitions`` replaced by its target, except a recursive one."""
    if isinstance(node, list):
        return [_inline(item, definitions, stack, kept) for item in node]
    if not isinstance(node, dict):
        return node
    reference = node.get("$ref")
    if not isinstance(reference, str) or not reference.startswith(_DEFS_PREFIX):
        return {key: _inline(value, definitions, stack, kept) for key, value in node.items()}
    siblings = {key: _inline(value, definitions, stack, kept) for key, value in node.items() if key != "$ref"}
    name = reference[len(_DEFS_PREFIX) :]
    if name in stack or name not in definitions:
        kept.add(name)
        return {"$ref": reference, **siblings}
    target = _inline(definitions[name], definitions, stack | {name}, kept)
    return {**target, **siblings}


def _kept_definitions(definitions: Mapping[str, Any], kept: set[str]) -> dict[str, Any]:
    """The definitions a recursive type still refers to, each inlined as far as it can be."""
    found: dict[str, Any] = {}
    pending = sorted(kept)
    while pending:
        name = pending.pop()
        if name in found or name not in definitions:
            continue
        more: set[str] = set()
        found[name] = _inline(definitions[name], definitions, frozenset({name}), more)
        pending.extend(sorted(more - set(found)))
    return dict(sorted(found.items()))


def _untitled(schema: Any) -> Any:
    """``schema`` without the ``title`` keys of its schema objects (property names are kept)."""
    if not isinstance(schema, dict):
        return schema
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _ONE_SCHEMA:
            cleaned[key] = _untitled(value)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            cleaned[key] = [_untitled(item) for item in value]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            cleaned[key] = {name: _untitled(item) for name, item in value.items()}
        else:
            cleaned[key] = value
    return cleaned


def validation_problems(errors: Iterable[Mapping[str, Any]], *, limit: int = 5) -> str:
    """pydantic's errors in one line a model can act on: ``steps[0].city: Field required; ...``."""
    lines = []
    listed = list(errors)
    for error in listed[:limit]:
        where = _location(error.get("loc", ()))
        message = str(error.get("msg", "invalid"))
        lines.append(f"{where}: {message}" if where else message)
    more = len(listed) - limit
    if more > 0:
        lines.append(f"and {more} more problem(s)")
    return "; ".join(lines)


def _location(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def json_output(value: Any) -> Any:
    """``value`` as JSON data when it is a pydantic model or dataclass instance (``mode="json"``:
    dates as ISO strings, enums as values); anything else as it is."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type_adapter(type(value)).dump_python(value, mode="json")
    return value

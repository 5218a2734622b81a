"""Tool-call arguments checked against an action's ``parameters`` schema.

:func:`argument_problem` validates with ``jsonschema`` (JSON Schema draft
2020-12, whole schema: nested objects, arrays, bounds, ``anyOf`` ...) and
names the most relevant problem in one line a model can act on: what is
missing, unexpected or of the wrong type, and where (``filters[0].op``).

One deliberate strictness: ``integer`` means a JSON integer (``2``, not
``2.0``), because the action's code receives the value as it came.
``format`` is not asserted. A schema that is itself invalid is the action's
bug, not the model's: ``jsonschema`` raises (the contract kit's
``check_action`` reports it first).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator, TypeChecker, validators
from jsonschema.exceptions import ValidationError, best_match, by_relevance
from jsonschema.protocols import Validator


def _is_integer(checker: TypeChecker, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


ArgumentValidator: type[Validator] = validators.extend(  # type: ignore[no-untyped-call]  # untyped in its stubs
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)
"""Draft 2020-12 whose ``integer`` accepts Python ints only (never ``True`` or ``2.0``)."""

# At the same depth, a missing key is named before an unexpected one or a wrong type.
_RELEVANCE = by_relevance(strong=frozenset({"required"}))

# Bounds said without repeating the value, which may be long.
_SAID = {
    "minimum": "must be at least {}",
    "maximum": "must be at most {}",
    "exclusiveMinimum": "must be greater than {}",
    "exclusiveMaximum": "must be less than {}",
    "multipleOf": "must be a multiple of {}",
    "minLength": "must be at least {} character(s) long",
    "maxLength": "must be at most {} character(s) long",
    "pattern": "must match the pattern {!r}",
    "minItems": "must have at least {} item(s)",
    "maxItems": "must have at most {} item(s)",
    "uniqueItems": "must not repeat an item",
    "minProperties": "must have at least {} key(s)",
    "maxProperties": "must have at most {} key(s)",
}
_MAX_MESSAGE = 200


def argument_problem(*, schema: Mapping[str, Any], arguments: Any) -> str | None:
    """The most relevant way ``arguments`` break ``schema``, in one line; ``None`` when they fit."""
    error = best_match(ArgumentValidator(schema).iter_errors(arguments), key=_RELEVANCE)
    return None if error is None else _describe(error)


def _describe(error: ValidationError) -> str:
    """One line for a model: the keyword that failed, said plainly, with where it failed."""
    where = _location(error.absolute_path)
    keyword, instance = str(error.validator), error.instance
    expected: Any = error.validator_value
    if keyword == "required" and isinstance(instance, Mapping):
        missing = ", ".join(key for key in expected if key not in instance)
        if not where:
            return f"missing required argument(s): {missing}"
        return f"argument {where!r} is missing required key(s): {missing}"
    if keyword == "additionalProperties" and expected is False and isinstance(instance, Mapping):
        extra = ", ".join(_unexpected_keys(error.schema, instance))
        if not where:
            return f"unexpected argument(s): {extra}"
        return f"argument {where!r} has unexpected key(s): {extra}"
    subject = f"argument {where!r}" if where else "the arguments"
    if keyword == "type":
        kinds = " or ".join(expected) if isinstance(expected, list) else expected
        return f"{subject} must be of type {kinds}"
    if keyword == "enum":
        return f"{subject} must be one of {list(expected)}"
    if keyword == "const":
        return f"{subject} must be {json.dumps(expected)}"
    if keyword in _SAID:
        return f"{subject} {_SAID[keyword].format(expected)}"
    message = error.message  # jsonschema's own words; they quote the value, so keep them short
    return f"{subject}: {message if len(message) <= _MAX_MESSAGE else message[:_MAX_MESSAGE] + '...'}"


def _location(path: Iterable[str | int]) -> str:
    """A path into the arguments as a reader writes it: ``plan.steps[0].filters``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def _unexpected_keys(schema: Any, instance: Mapping[str, Any]) -> list[str]:
    """Keys that neither ``properties`` nor ``patternProperties`` of ``schema`` allow."""
    properties = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
    patterns = schema.get("patternProperties", {}) if isinstance(schema, Mapping) else {}
    return sorted(
        key
        for key in instance
        if key not in properties and not any(re.search(pattern, key) for pattern in patterns)
    )

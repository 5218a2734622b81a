"""``argument_problem``: arguments checked against the whole JSON Schema, the problem named in one line."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema.exceptions import UnknownType

from agentloop.actions.arguments import argument_problem

SEARCH = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        "order": {"enum": ["newest", "oldest"]},
        "since": {"type": ["string", "null"], "format": "date"},
    },
    "required": ["query", "limit"],
    "additionalProperties": False,
}
PLAN = {
    "type": "object",
    "properties": {
        "plan": {
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {
                        "type": "object",
                        "properties": {
                            "field": {"type": "string"},
                            "op": {"enum": ["eq", "lt", "gt"]},
                            "value": {"anyOf": [{"type": "string"}, {"type": "number"}]},
                        },
                        "required": ["field", "op", "value"],
                        "additionalProperties": False,
                    },
                },
                "labels": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
            },
            "required": ["steps"],
            "additionalProperties": False,
        }
    },
    "required": ["plan"],
}
STEP = {"field": "country", "op": "eq", "value": "Germany"}


@pytest.mark.parametrize(
    ("schema", "arguments"),
    [
        (SEARCH, {"query": "cats", "limit": 3}),
        (SEARCH, {"query": "cats", "limit": 50, "order": "oldest", "since": None}),
        (PLAN, {"plan": {"steps": [STEP, {**STEP, "op": "gt", "value": 2.5}]}}),
        (PLAN, {"plan": {"steps": [STEP], "labels": {"x-source": "crm"}}}),
        ({"type": "object"}, {"anything": [1, {"goes": None}]}),
    ],
)
def test_arguments_that_fit_the_schema_have_no_problem(schema: dict[str, Any], arguments: Any) -> None:
    assert argument_problem(schema=schema, arguments=arguments) is None


TOP_LEVEL = [
    ("one missing", {"limit": 3}, "missing required argument(s): query"),
    ("all missing, in the schema's order", {}, "missing required argument(s): query, limit"),
    (
        "unexpected, sorted",
        {"query": "a", "limit": 1, "zeta": 1, "alpha": 2},
        "unexpected argument(s): alpha, zeta",
    ),
    ("wrong type", {"query": 3, "limit": 1}, "argument 'query' must be of type string"),
    (
        "one of several types",
        {"query": "a", "limit": 1, "since": 5},
        "argument 'since' must be of type string or null",
    ),
    (
        "not in the enum",
        {"query": "a", "limit": 1, "order": "random"},
        "argument 'order' must be one of ['newest', 'oldest']",
    ),
    ("below the minimum", {"query": "a", "limit": 0}, "argument 'limit' must be at least 1"),
    ("above the maximum", {"query": "a", "limit": 51}, "argument 'limit' must be at most 50"),
    ("too short", {"query": "", "limit": 1}, "argument 'query' must be at least 1 character(s) long"),
]


@pytest.mark.parametrize(("arguments", "problem"), [c[1:] for c in TOP_LEVEL], ids=[c[0] for c in TOP_LEVEL])
def test_a_top_level_problem_names_the_argument(arguments: dict[str, Any], problem: str) -> None:
    assert argument_problem(schema=SEARCH, arguments=arguments) == problem


NESTED = [
    (
        "missing key in an array item",
        {"plan": {"steps": [STEP, {"field": "f", "value": 1}]}},
        "argument 'plan.steps[1]' is missing required key(s): op",
    ),
    (
        "unexpected key in a nested object",
        {"plan": {"steps": [{**STEP, "not": True}]}},
        "argument 'plan.steps[0]' has unexpected key(s): not",
    ),
    (
        "enum deep inside",
        {"plan": {"steps": [{**STEP, "op": "like"}]}},
        "argument 'plan.steps[0].op' must be one of ['eq', 'lt', 'gt']",
    ),
    (
        "no branch of anyOf fits",
        {"plan": {"steps": [{**STEP, "value": None}]}},
        "argument 'plan.steps[0].value': None is not valid under any of the given schemas",
    ),
    ("an array too short", {"plan": {"steps": []}}, "argument 'plan.steps' must have at least 1 item(s)"),
    (
        "an array too long",
        {"plan": {"steps": [STEP] * 4}},
        "argument 'plan.steps' must have at most 3 item(s)",
    ),
    (
        "an object where an array belongs",
        {"plan": {"steps": STEP}},
        "argument 'plan.steps' must be of type array",
    ),
    (
        "a key no pattern allows",
        {"plan": {"steps": [STEP], "labels": {"x-a": 1}}},
        "argument 'plan.labels.x-a' must be of type string",
    ),
    ("a missing nested object", {}, "missing required argument(s): plan"),
]


@pytest.mark.parametrize(("arguments", "problem"), [c[1:] for c in NESTED], ids=[c[0] for c in NESTED])
def test_a_nested_problem_names_its_path(arguments: dict[str, Any], problem: str) -> None:
    assert argument_problem(schema=PLAN, arguments=arguments) == problem


def test_a_missing_argument_comes_before_an_unexpected_one_and_a_shallow_problem_before_a_deep_one() -> None:
    broken = {"plan": {"steps": [{"op": "eq"}]}, "stray": 1}

    assert argument_problem(schema={**PLAN, "additionalProperties": False}, arguments={"stray": 1}) == (
        "missing required argument(s): plan"
    )
    assert argument_problem(schema={**PLAN, "additionalProperties": False}, arguments=broken) == (
        "unexpected argument(s): stray"
    )


@pytest.mark.parametrize(
    ("value", "fits"),
    [(2, True), (-7, True), (2.0, False), (True, False), ("2", False)],
)
def test_an_integer_is_a_json_integer_only(value: Any, fits: bool) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}

    problem = argument_problem(schema=schema, arguments={"n": value})

    assert problem == (None if fits else "argument 'n' must be of type integer")


@pytest.mark.parametrize(("value", "fits"), [(2, True), (2.5, True), (2.0, True), (False, False)])
def test_a_number_is_an_int_or_a_float_but_not_a_boolean(value: Any, fits: bool) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "number"}}}

    assert (argument_problem(schema=schema, arguments={"x": value}) is None) is fits


@pytest.mark.parametrize(
    ("keyword", "arguments", "problem"),
    [
        ({"const": "eq"}, "lt", "argument 'v' must be \"eq\""),
        ({"pattern": "^[a-z]+$"}, "A1", "argument 'v' must match the pattern '^[a-z]+$'"),
        ({"multipleOf": 5}, 12, "argument 'v' must be a multiple of 5"),
        ({"exclusiveMinimum": 0}, 0, "argument 'v' must be greater than 0"),
        ({"uniqueItems": True}, [1, 1], "argument 'v' must not repeat an item"),
        ({"maxProperties": 1}, {"a": 1, "b": 2}, "argument 'v' must have at most 1 key(s)"),
    ],
)
def test_bounds_are_said_without_repeating_the_value(
    keyword: dict[str, Any], arguments: Any, problem: str
) -> None:
    schema = {"type": "object", "properties": {"v": keyword}}

    assert argument_problem(schema=schema, arguments={"v": arguments}) == problem


def test_a_message_that_quotes_a_long_value_is_clipped() -> None:
    schema = {"type": "object", "properties": {"v": {"not": {"type": "string"}}}}

    problem = argument_problem(schema=schema, arguments={"v": "x" * 5000})

    assert problem is not None and problem.startswith("argument 'v': 'xxx") and problem.endswith("...")
    assert len(problem) < 300


def test_formats_are_annotations_not_assertions() -> None:
    assert (
        argument_problem(schema=SEARCH, arguments={"query": "a", "limit": 1, "since": "not a date"}) is None
    )


def test_a_schema_that_is_itself_invalid_is_the_actions_bug_and_raises() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "str"}}}

    with pytest.raises(UnknownType):
        argument_problem(schema=schema, arguments={"q": "x"})

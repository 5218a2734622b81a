"""``agentloop.orchestration.redaction`` at its edges: the limits of what is shown, what of a node is hidden,
every quoting a secret may take in a message, the bounds on the work done, and URLs whose
password or query is unusual. Pure functions, no Celery."""

from __future__ import annotations

import gc
import json
import weakref
from typing import Any

import pytest

from agentloop.orchestration.redaction import (
    MAX_EXCEPTION_CHARS,
    MAX_SHOWN_CHARS,
    MIN_SCRUB_CHARS,
    hidden_texts,
    hide_result,
    parameter_names,
    redact_call,
    redact_url,
    scrub,
)
from agentloop.orchestration.wire import DEGRADED_KEY

STAGE = ("previous", "node", "index", "input")


def node(**fields: Any) -> dict[str, Any]:
    return {"run_id": "run-1", "runnable": "parity.three_stages", "path": "pipeline/1", **fields}


# ----- what is shown ---------------------------------------------------------------------------------


def test_a_shown_parameter_is_shown_up_to_its_length_limit_and_hidden_past_it() -> None:
    at_limit, past_limit = "r" * MAX_SHOWN_CHARS, "r" * (MAX_SHOWN_CHARS + 1)
    _, shown = redact_call((), {"runnable": at_limit})
    _, hidden = redact_call((), {"runnable": past_limit})
    assert shown == f"{{'runnable': '{at_limit}'}}"
    assert hidden == f"{{'runnable': <hidden str {MAX_SHOWN_CHARS + 1} chars>}}"


def test_a_node_shows_only_its_short_identifiers_and_nothing_when_it_has_none() -> None:
    long_path = node(path="p" * (MAX_SHOWN_CHARS + 1))
    described = [
        redact_call((None, value), {}, STAGE)[0]
        for value in (node(), {"runnable": "only"}, long_path, {"context": {"k": "v"}}, "not-a-node")
    ]
    assert described == [
        "(previous=None, node=<node runnable='parity.three_stages' path='pipeline/1' run_id='run-1'>)",
        "(previous=None, node=<node runnable='only'>)",
        "(previous=None, node=<node runnable='parity.three_stages' run_id='run-1'>)",
        "(previous=None, node=<node>)",
        "(previous=None, node=<hidden str 10 chars>)",
    ]


def test_a_degraded_runs_hidden_result_keeps_its_mark() -> None:
    degraded = repr({DEGRADED_KEY: True, "result": "x"})
    assert (
        hide_result(degraded, "agentloop.finalize") == f"<hidden result, {len(degraded)} chars; run degraded>"
    )
    assert hide_result(json.dumps({DEGRADED_KEY: True}), "agentloop.finalize").endswith("; run degraded>")
    assert hide_result("{'result': 'x'}", "agentloop.finalize") == "<hidden result, 15 chars>"


# ----- what of a call is scrubbed ------------------------------------------------------------------------


def test_a_nodes_context_and_owner_token_are_scrubbed_but_where_it_is_stays_readable() -> None:
    secrets = hidden_texts(
        ({}, node(context={"api_key": "ctx-key-123"}, owner_token="owner-tok-456"), 1, None), {}, STAGE
    )
    message = "stage of parity.three_stages at pipeline/1 failed: ctx-key-123 / owner-tok-456"
    assert scrub(message, secrets) == "stage of parity.three_stages at pipeline/1 failed: <hidden> / <hidden>"


def test_a_node_that_is_not_a_mapping_is_hidden_whole() -> None:
    assert scrub("got node-as-text", hidden_texts((None, "node-as-text"), {}, STAGE)) == "got <hidden>"


def test_a_shown_parameter_too_long_to_show_is_scrubbed_and_arguments_past_the_names_are_too() -> None:
    long_name = "n" * (MAX_SHOWN_CHARS + 1)
    secrets = hidden_texts(({}, node(), 1, None, "extra-secret"), {"runnable": long_name}, STAGE)
    assert scrub(f"{long_name} extra-secret", secrets) == "<hidden> <hidden>"


def test_strings_from_the_minimum_length_on_are_scrubbed_whatever_comes_before_them() -> None:
    exact, short = "s" * MIN_SCRUB_CHARS, "t" * (MIN_SCRUB_CHARS - 1)
    secrets = hidden_texts((), {"input": [short, exact, "later-secret"]})
    assert scrub(f"{short} {exact} later-secret", secrets) == f"{short} <hidden> <hidden>"


def test_a_secret_containing_another_is_scrubbed_whole() -> None:
    inner, outer = "zzzz-inner-key", "aaaa-prefix-zzzz-inner-key-suffix"
    secrets = hidden_texts((), {"input": {"a": inner, "b": outer}})
    assert scrub(f"saw {outer}", secrets) == "saw <hidden>"


@pytest.mark.parametrize(
    "quoted",
    [
        lambda text: repr(text),  # 'tab\there "quoted"'
        lambda text: json.dumps(text),  # non-ASCII as \\u escapes
        lambda text: json.dumps(text, ensure_ascii=False),
        lambda text: repr(repr(text)),  # quoted twice
    ],
    ids=["repr", "json-ascii", "json-unicode", "repr-of-repr"],
)
def test_a_secret_is_scrubbed_in_every_quoting_it_may_take(quoted: Any) -> None:
    text = 'naïve tab\there "quoted"\rend'
    secrets = hidden_texts((), {"input": {"note": text}})
    message = f"cannot parse {quoted(text)}"
    assert "naïve" not in scrub(message, secrets) and "na\\u00efve" not in scrub(message, secrets)
    assert scrub(message, secrets).startswith("cannot parse ")


def test_the_escaped_forms_of_a_secret_include_each_quote_escaped_alone() -> None:
    text = "tab\tthere \"double\" and 'single'\x0b"
    escaped = text.replace("\t", "\\t")
    secrets = set(hidden_texts((), {"input": text}))
    assert {escaped, escaped.replace("'", "\\'"), escaped.replace('"', '\\"')} <= secrets


def test_secrets_are_searched_32_levels_deep_and_no_deeper() -> None:
    def nested(levels: int, leaf: str) -> Any:
        value: Any = leaf
        for _ in range(levels):
            value = [value]
        return value

    found = hidden_texts((), {"input": nested(31, "deep-secret-31")})
    too_deep = hidden_texts((), {"input": nested(32, "deep-secret-32")})
    assert "deep-secret-31" in found and too_deep == ()


def test_secrets_in_mappings_are_searched_32_levels_deep_and_no_deeper() -> None:
    def nested(levels: int, leaf: str) -> Any:
        value: Any = leaf
        for _ in range(levels):
            value = {"k": value}
        return value

    found = hidden_texts((), {"input": nested(31, "deep-secret-31")})
    too_deep = hidden_texts((), {"input": nested(32, "deep-secret-32")})
    assert "deep-secret-31" in found and too_deep == ()


def test_the_forms_of_a_secret_are_never_empty_nor_text_it_does_not_contain() -> None:
    secrets = hidden_texts((), {"input": "plain-secret"})
    assert "" not in secrets and all("plain-secret" in form for form in secrets)
    assert scrub("a full null line", secrets) == "a full null line"


def test_a_secret_with_control_characters_is_scrubbed_from_json_that_keeps_unicode() -> None:
    text = 'naïve "quoted"\x0b'
    secrets = hidden_texts((), {"input": text})
    message = f"bad payload {json.dumps({'note': text}, ensure_ascii=False)}"
    assert scrub(message, secrets) == 'bad payload {"note": "<hidden>"}'


def test_at_most_a_thousand_texts_are_kept_from_one_call() -> None:
    many = [f"leaf-{n:06d}" for n in range(1100)]  # plain text: each is one form
    secrets = hidden_texts((), {"input": many})
    assert len(secrets) == 1000 and "leaf-000000" in secrets and "leaf-001000" not in secrets


# ----- scrub --------------------------------------------------------------------------------------------


def test_scrub_keeps_every_line_and_cuts_only_lines_past_the_limit() -> None:
    exact, over = "a" * MAX_EXCEPTION_CHARS, "b" * (MAX_EXCEPTION_CHARS + 1)
    assert scrub(f"{exact}\n{exact}") == f"{exact}\n{exact}"
    assert scrub(over) == f"{'b' * MAX_EXCEPTION_CHARS}... [1 more chars hidden]"
    assert scrub("ab", [""]) == "ab"  # an empty secret hides nothing
    assert scrub(7, ["7"]) == 7


# ----- parameter names -----------------------------------------------------------------------------------


class Task:
    def run(self, previous: Any, node: Any, index: int) -> None:
        pass


class Unhashable:
    __hash__ = None  # type: ignore[assignment]

    def __call__(self, first: Any, second: Any) -> None:
        pass


def test_parameter_names_keep_no_bound_task_alive_and_read_unhashable_callables() -> None:
    task = Task()
    assert parameter_names(task.run) == ("previous", "node", "index")
    gone = weakref.ref(task)
    del task
    gc.collect()
    assert gone() is None  # the cache holds the plain function, not the task it was bound to
    assert parameter_names(Unhashable()) == ("first", "second")


# ----- URLs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://:p@ss@host:6379/0", "redis://:***@host:6379/0"),  # an unencoded @ in the password
        ("amqp://user:pa:ss@host//", "amqp://user:***@host//"),  # a colon in the password
        ("amqp://guest:@host//", "amqp://guest:@host//"),  # an empty password: nothing to hide
        ("redis://h:6379/0?password=&db=1", "redis://h:6379/0?password=***&db=1"),  # blank, still masked
    ],
)
def test_redact_url_with_unusual_passwords(url: str, expected: str) -> None:
    assert redact_url(url) == expected

"""What is shown of values that may hold secrets: task arguments, results, error texts and URLs.

Pure functions (:mod:`agentloop.orchestration.redaction`), no Celery and no server.
"""

from __future__ import annotations

import pytest

from agentloop.orchestration.redaction import (
    MAX_EXCEPTION_CHARS,
    describe_hidden,
    hidden_texts,
    hide_result,
    parameter_names,
    redact_call,
    redact_url,
    scrub,
)

SECRET = "sk-test-MARKER123"
INPUT = {"question": "what is my balance?", "secret": SECRET}
NODE = {
    "run_id": "run-1",
    "runnable": "parity.three_stages",
    "path": "pipeline/1",
    "context": {"tenant_token": f"ctx-{SECRET}"},
    "ancestors": [],
    "capture": None,
}


# -- the redacted form -----------------------------------------------------------------------------


def test_a_launch_call_shows_its_runnable_and_run_id_and_only_the_size_of_its_input() -> None:
    argsrepr, kwargsrepr = redact_call(
        (), {"runnable": "record_search.demo", "input": INPUT, "context": {"k": "v"}, "run_id": "r-1"}
    )
    assert argsrepr == "()"
    assert kwargsrepr == (
        "{'runnable': 'record_search.demo', 'input': <hidden dict 66 chars>, "
        "'context': <hidden dict 10 chars>, 'run_id': 'r-1'}"
    )


def test_positional_arguments_are_named_and_a_node_shows_where_it_is_but_not_its_context() -> None:
    argsrepr, kwargsrepr = redact_call(
        ({"carried": INPUT}, NODE, 1, INPUT), {}, ("previous", "node", "index", "input")
    )
    assert argsrepr == (
        "(previous=<hidden dict 79 chars>, "
        "node=<node runnable='parity.three_stages' path='pipeline/1' run_id='run-1'>, "
        "index=1, input=<hidden dict 66 chars>)"
    )
    assert kwargsrepr == "{}"
    assert SECRET not in argsrepr


def test_unknown_positions_long_or_unprintable_identifiers_and_content_names_are_hidden() -> None:
    argsrepr, kwargsrepr = redact_call(
        (SECRET, 7), {"run_id": "x" * 300, "runnable": "a\nb", "input": 3, "inputs": None}
    )
    assert argsrepr == "(<hidden str 17 chars>, <hidden int>)"
    assert kwargsrepr == (
        "{'run_id': <hidden str 300 chars>, 'runnable': <hidden str 3 chars>, "
        "'input': <hidden int>, 'inputs': None}"
    )


def test_results_are_hidden_except_those_that_carry_no_content() -> None:
    assert hide_result("{'carried': 'x'}", "agentloop.stage") == "<hidden result, 16 chars>"
    assert hide_result("True", "agentloop.cancel") == "True"
    assert hide_result("None", "agentloop.run") == "None"
    assert describe_hidden([1, 2]) == "<hidden list 6 chars>"


def test_exception_texts_lose_the_hidden_arguments_text_in_any_quoting_and_are_bounded() -> None:
    note = 'it\'s "quoted"\nsecond line'
    secrets = hidden_texts((), {"runnable": "parity.count", "input": {"note": note}})
    error = ValueError(f"bad input {{'note': {note!r}}}")
    for text in (str(error), repr(error), f"Traceback ...\nValueError: {error}"):
        assert "quoted" not in scrub(text, secrets), text
    assert "parity.count" in scrub("unknown runnable 'parity.count'", secrets)  # shown values stay
    assert scrub("x" * (MAX_EXCEPTION_CHARS + 50)).endswith("... [50 more chars hidden]")
    assert hidden_texts((), {"input": "short"}) == ()  # shorter than MIN_SCRUB_CHARS: left alone


def test_parameter_names_are_the_positional_ones_in_order_without_self() -> None:
    class Task:
        def run(
            self, previous: object, node: object, /, index: int, *rest: object, flag: bool = False
        ) -> None:
            pass

    assert parameter_names(Task().run) == ("previous", "node", "index")
    assert parameter_names(None) is None
    assert parameter_names(object()) is None  # not a callable: no signature to read


# -- URLs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # brokers and backends: the password masked, everything else kept for the operator
        ("amqp://guest:secret@127.0.0.1:5672//", "amqp://guest:***@127.0.0.1:5672//"),
        ("redis://:secret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://:pw@host:1/0", "redis://:***@host:1/0"),
        (
            "rediss://user:s%40cret@h:6380/1?ssl_cert_reqs=required",
            "rediss://user:***@h:6380/1?ssl_cert_reqs=required",
        ),
        ("db+postgresql://app:secret@db:5432/runs", "db+postgresql://app:***@db:5432/runs"),
        ("redis://h:6379/0?password=secret&db=1", "redis://h:6379/0?password=***&db=1"),
        ("amqp://a:x@h1//;amqp://b:y@h2//", "amqp://a:***@h1//;amqp://b:***@h2//"),
        ("amqp://[::1]:5672//", "amqp://[::1]:5672//"),
        ("redis://:pw@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
        ("amqp://guest@h//", "amqp://guest@h//"),
        ("memory://", "memory://"),
        ("cache+memory://", "cache+memory://"),
        ("rpc://", "rpc://"),
        ("sqlite:////var/lib/agentloop/runs.sqlite3", "sqlite:////var/lib/agentloop/runs.sqlite3"),
        # model servers: key-like query values and the fragment hidden too
        ("https://api.openai.com/v1/", "https://api.openai.com/v1/"),
        ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1/"),
        (
            "https://h.example/v1?api-key=k1&api-version=2024",
            "https://h.example/v1?api-key=***&api-version=2024",
        ),
        ("https://h.example/v1?key=k1", "https://h.example/v1?key=***"),
        ("https://u:p@h.example/v1#token=t", "https://u:***@h.example/v1"),
        # not a URL one can parse: nothing of it shown
        ("http://[::1", "<unparsable url>"),
    ],
)
def test_redact_url_hides_passwords_key_like_query_values_and_fragments_and_keeps_the_rest(
    url: str, expected: str
) -> None:
    assert redact_url(url) == expected


def test_a_string_in_a_numeric_parameter_is_hidden_like_any_content() -> None:
    _, kwargsrepr = redact_call((), {"runnable": "parity.count", "token_budget": "postgres://a:pw@db"})
    assert kwargsrepr == "{'runnable': 'parity.count', 'token_budget': <hidden str 18 chars>}"
    assert "postgres" not in scrub(
        "got 'postgres://a:pw@db'", hidden_texts((), {"token_budget": "postgres://a:pw@db"})
    )

"""What agentloop tasks carry stays out of messages' reprs, events and log lines (no server needed)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.mocks import TaskMessage

from orchestration.celery_adapter.app import create_app
from orchestration.celery_adapter.privacy import (
    MAX_EXCEPTION_CHARS,
    RedactingAMQP,
    RedactingRequest,
    describe_hidden,
    hidden_texts,
    hide_result,
    install_privacy,
    redact_call,
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


@pytest.fixture
def app() -> Iterator[Celery]:
    app = create_app(overrides={"broker_url": "memory://", "result_backend": "cache+memory://"})

    @app.task(name="agentloop.test_echo", shared=False)
    def echo(secret: str) -> dict[str, str]:
        return {"echo": secret}

    @app.task(name="agentloop.test_explode", shared=False)
    def explode(input: Any) -> None:
        raise ValueError(f"cannot handle {input!r}")

    @app.task(name="other.echo", shared=False)
    def other(secret: str) -> str:
        return secret

    app.finalize()
    yield app
    app.close()


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


# -- producer: messages and the task-sent event ----------------------------------------------------


def _message(app: Celery, name: str, args: Any = (), kwargs: Any = None) -> Any:
    return app.amqp.create_task_message(
        "id-1", name, args, kwargs or {}, create_sent_event=True, root_id="id-1", parent_id=None
    )


def test_messages_of_agentloop_tasks_carry_redacted_reprs_in_headers_and_sent_event(app: Celery) -> None:
    assert isinstance(app.amqp, RedactingAMQP)
    message = _message(app, "agentloop.launch", kwargs={"runnable": "parity.count", "input": INPUT})
    shown = (message.headers["argsrepr"], message.headers["kwargsrepr"], str(message.sent_event))
    assert SECRET not in " ".join(shown)
    assert "'runnable': 'parity.count'" in message.headers["kwargsrepr"]
    assert message.body[1]["input"] == INPUT  # the task itself still gets its input

    stage = _message(app, "agentloop.stage", args=({"carried": INPUT}, NODE, 1, INPUT))
    assert stage.headers["argsrepr"].startswith("(previous=<hidden dict")
    assert SECRET not in stage.headers["argsrepr"]


def test_messages_of_other_tasks_keep_celerys_repr(app: Celery) -> None:
    message = _message(app, "other.echo", args=(SECRET,))
    assert SECRET in message.headers["argsrepr"]


def test_an_app_whose_amqp_was_already_built_is_redacted_too() -> None:
    app = Celery("late", set_as_current=False, broker="memory://")
    _ = app.amqp.create_task_message  # built and cached before privacy is installed
    install_privacy(app)
    message = _message(app, "agentloop.launch", kwargs={"runnable": "r", "input": INPUT})
    assert SECRET not in message.headers["kwargsrepr"]
    assert SECRET not in str(message.sent_event)
    app.close()


# -- worker: the request -----------------------------------------------------------------------------


class _Eventer:
    enabled = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, type: str, **fields: Any) -> None:
        self.sent.append((type, fields))


def _request(app: Celery, name: str, **message: Any) -> tuple[RedactingRequest, _Eventer]:
    eventer = _Eventer()
    task = app.tasks[name]
    assert task.Request is RedactingRequest
    request = RedactingRequest(
        TaskMessage(name, **message), app=app, task=task, eventer=eventer, hostname="w@h"
    )
    return request, eventer


def test_a_request_from_a_producer_without_privacy_shows_only_redacted_reprs(app: Celery) -> None:
    plain = {"runnable": "parity.count", "input": INPUT}
    request, _ = _request(app, "agentloop.launch", kwargs=plain, argsrepr="()", kwargsrepr=repr(plain))
    for text in (request.argsrepr, request.kwargsrepr, repr(request), str(request.info(safe=False))):
        assert SECRET not in text
    assert SECRET not in request.request_dict["kwargsrepr"]  # what the pool child logs
    assert request.kwargs["input"] == INPUT


def test_a_requests_events_hide_the_result_and_scrub_exceptions(app: Celery) -> None:
    request, eventer = _request(app, "agentloop.launch", kwargs={"runnable": "r", "input": INPUT})
    request.send_event("task-succeeded", result=repr({"carried": INPUT}), runtime=0.1)
    request.send_event("task-failed", exception=f"ValueError('{SECRET}')", traceback=f"...\n{SECRET}\n")
    assert SECRET not in str(eventer.sent)
    assert eventer.sent[0][1]["result"].startswith("<hidden result")
    assert "<hidden>" in eventer.sent[1][1]["exception"]


def test_requests_of_other_tasks_are_celerys(app: Celery) -> None:
    request, eventer = _request(app, "other.echo", args=(SECRET,), argsrepr=repr((SECRET,)))
    request.send_event("task-succeeded", result=repr(SECRET), runtime=0.1)
    assert SECRET in request.argsrepr
    assert SECRET in str(eventer.sent)


# -- logs ------------------------------------------------------------------------------------------


def test_the_success_line_of_an_agentloop_task_hides_its_return_value(
    app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="celery.app.trace"):
        assert app.tasks["agentloop.test_echo"].apply(args=(SECRET,)).get() == {"echo": SECRET}
    lines = [record for record in caplog.records if "succeeded in" in record.getMessage()]
    assert len(lines) == 1
    assert lines[0].getMessage().endswith(": <hidden result, 29 chars>")
    assert SECRET not in caplog.text
    assert SECRET not in str(vars(lines[0])["data"])  # what custom handlers get


def test_the_failure_line_and_traceback_lose_the_input_text(
    app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="celery.app.trace"):
        result = app.tasks["agentloop.test_explode"].apply(kwargs={"input": INPUT})
    assert result.failed()
    assert "raised unexpected: ValueError(\"cannot handle {'question': '<hidden>'" in caplog.text
    assert "Traceback (most recent call last)" in caplog.text
    assert SECRET not in caplog.text


def test_other_tasks_log_as_celery_does(app: Celery, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="celery.app.trace"):
        app.tasks["other.echo"].apply(args=(SECRET,))
    assert f"'{SECRET}'" in caplog.text


def test_the_pool_debug_line_does_not_dump_an_agentloop_message() -> None:
    logger = logging.getLogger("celery.pool")
    record = logger.makeRecord(
        "celery.pool",
        logging.DEBUG,
        __file__,
        1,
        "TaskPool: Apply %s (args:%s kwargs:%s)",
        ("<fn>", f"('agentloop.launch', 'id', {{'input': '{SECRET}'}})", "{}"),
        None,
    )
    for log_filter in logger.filters:
        log_filter.filter(record)
    assert SECRET not in record.getMessage()

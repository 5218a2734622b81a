"""What agentloop tasks carry stays out of messages' reprs, events and log lines (no server needed).

What is shown of a value is :mod:`agentloop.orchestration.redaction`'s (``test_ops_redaction.py``); these
tests
check that Celery's producer, worker request and loggers show only that.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.mocks import TaskMessage

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.privacy import PrivateAMQP, RedactingRequest, install_privacy

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
def echo_app() -> Iterator[Celery]:
    echo_app = create_app(overrides={"broker_url": "memory://", "result_backend": "cache+memory://"})

    @echo_app.task(name="agentloop.test_echo", shared=False)
    def echo(secret: str) -> dict[str, str]:
        return {"echo": secret}

    @echo_app.task(name="agentloop.test_explode", shared=False)
    def explode(input: Any) -> None:
        raise ValueError(f"cannot handle {input!r}")

    @echo_app.task(name="other.echo", shared=False)
    def other(secret: str) -> str:
        return secret

    echo_app.finalize()
    yield echo_app
    echo_app.close()


# -- producer: messages and the task-sent event ----------------------------------------------------


def _message(app: Celery, name: str, args: Any = (), kwargs: Any = None) -> Any:
    return app.amqp.create_task_message(
        "id-1", name, args, kwargs or {}, create_sent_event=True, root_id="id-1", parent_id=None
    )


def test_messages_of_agentloop_tasks_carry_redacted_reprs_in_headers_and_sent_event(echo_app: Celery) -> None:
    assert isinstance(echo_app.amqp, PrivateAMQP)
    message = _message(echo_app, "agentloop.launch", kwargs={"runnable": "parity.count", "input": INPUT})
    shown = (message.headers["argsrepr"], message.headers["kwargsrepr"], str(message.sent_event))
    assert SECRET not in " ".join(shown)
    assert "'runnable': 'parity.count'" in message.headers["kwargsrepr"]
    assert message.body[1]["input"] == INPUT  # the task itself still gets its input

    stage = _message(echo_app, "agentloop.stage", args=({"carried": INPUT}, NODE, 1, INPUT))
    assert stage.headers["argsrepr"].startswith("(previous=<hidden dict")
    assert SECRET not in stage.headers["argsrepr"]

    stages = _message(echo_app, "agentloop.stages", args=({"carried": INPUT}, NODE, 1, 3, INPUT))
    assert stages.headers["argsrepr"].startswith("(previous=<hidden dict")
    assert "count=3" in stages.headers["argsrepr"] and SECRET not in stages.headers["argsrepr"]


def test_messages_of_other_tasks_keep_celerys_repr(echo_app: Celery) -> None:
    message = _message(echo_app, "other.echo", args=(SECRET,))
    assert SECRET in message.headers["argsrepr"]


def test_a_callers_own_reprs_of_an_agentloop_task_are_replaced_by_the_redacted_ones(echo_app: Celery) -> None:
    kwargs = {"runnable": "parity.count", "input": INPUT}
    by_name = echo_app.amqp.create_task_message(
        "id-1", "agentloop.launch", (), kwargs, create_sent_event=True, kwargsrepr=repr(kwargs)
    )
    positional = [None] * 30  # every parameter of as_task_v2 by position, argsrepr/kwargsrepr included
    positional[:4] = ["id-2", "agentloop.launch", (), kwargs]
    by_position = echo_app.amqp.as_task_v2(*positional[:27])
    for message in (by_name, by_position):
        assert SECRET not in message.headers["kwargsrepr"]
        assert message.headers["kwargsrepr"].startswith("{'runnable': 'parity.count', 'input': <hidden dict")


def test_privacy_installed_on_any_app_before_its_first_message_redacts_it() -> None:
    echo_app = Celery("plain", set_as_current=False, broker="memory://")
    install_privacy(echo_app)
    install_privacy(echo_app)  # idempotent
    message = _message(echo_app, "agentloop.launch", kwargs={"runnable": "r", "input": INPUT})
    assert SECRET not in message.headers["kwargsrepr"]
    assert SECRET not in str(message.sent_event)
    echo_app.close()


def test_privacy_refuses_an_app_that_already_built_its_amqp_rather_than_leak() -> None:
    echo_app = Celery("late", set_as_current=False, broker="memory://")
    _ = echo_app.amqp.create_task_message  # built before privacy is installed: its class is chosen
    with pytest.raises(RuntimeError, match="before the app builds its AMQP"):
        install_privacy(echo_app)
    echo_app.close()


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


def test_a_request_from_a_producer_without_privacy_shows_only_redacted_reprs(echo_app: Celery) -> None:
    plain = {"runnable": "parity.count", "input": INPUT}
    request, _ = _request(echo_app, "agentloop.launch", kwargs=plain, argsrepr="()", kwargsrepr=repr(plain))
    for text in (request.argsrepr, request.kwargsrepr, repr(request), str(request.info(safe=False))):
        assert SECRET not in text
    assert SECRET not in request.request_dict["kwargsrepr"]  # what the pool child logs
    assert request.kwargs["input"] == INPUT


def test_a_requests_events_hide_the_result_and_scrub_exceptions(echo_app: Celery) -> None:
    request, eventer = _request(echo_app, "agentloop.launch", kwargs={"runnable": "r", "input": INPUT})
    request.send_event("task-succeeded", result=repr({"carried": INPUT}), runtime=0.1)
    request.send_event("task-failed", exception=f"ValueError('{SECRET}')", traceback=f"...\n{SECRET}\n")
    assert SECRET not in str(eventer.sent)
    assert eventer.sent[0][1]["result"].startswith("<hidden result")
    assert "<hidden>" in eventer.sent[1][1]["exception"]


def test_requests_of_other_tasks_are_celerys(echo_app: Celery) -> None:
    request, eventer = _request(echo_app, "other.echo", args=(SECRET,), argsrepr=repr((SECRET,)))
    request.send_event("task-succeeded", result=repr(SECRET), runtime=0.1)
    assert SECRET in request.argsrepr
    assert SECRET in str(eventer.sent)


# -- logs ------------------------------------------------------------------------------------------


def test_the_success_line_of_an_agentloop_task_hides_its_return_value(
    echo_app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="celery.app.trace"):
        assert echo_app.tasks["agentloop.test_echo"].apply(args=(SECRET,)).get() == {"echo": SECRET}
    lines = [record for record in caplog.records if "succeeded in" in record.getMessage()]
    assert len(lines) == 1
    assert lines[0].getMessage().endswith(": <hidden result, 29 chars>")
    assert SECRET not in caplog.text
    assert SECRET not in str(vars(lines[0])["data"])  # what custom handlers get


def test_the_failure_line_and_traceback_lose_the_input_text(
    echo_app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="celery.app.trace"):
        result = echo_app.tasks["agentloop.test_explode"].apply(kwargs={"input": INPUT})
    assert result.failed()
    assert "raised unexpected: ValueError(\"cannot handle {'question': '<hidden>'" in caplog.text
    assert "Traceback (most recent call last)" in caplog.text
    assert SECRET not in caplog.text


def test_other_tasks_log_as_celery_does(echo_app: Celery, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="celery.app.trace"):
        echo_app.tasks["other.echo"].apply(args=(SECRET,))
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

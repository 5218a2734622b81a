"""No message stops a worker: each poison kind is rejected at the edge, recorded, and acknowledged.

On a real prefork worker (private Redis), each kind of message that used to kill the worker's
main process, or to vanish while its client waited forever, is sent once. The worker stays up,
the next message still runs, the sender's ``get()`` raises at once with the reason, and a launch
is recorded as a failed run.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from celery.exceptions import InvalidTaskError
from edge_support import EdgeRig, send_raw


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"deeper": value}
    return value


def deep_json(depth: int) -> bytes:
    """A protocol-2 body whose kwargs are too deep for any JSON decoder on a default stack."""
    return b'[[], {"input": ' + b"[" * depth + b"]" * depth + b"}, {}]"


def assert_rejected_promptly(rig: EdgeRig, task_id: str, *, reason: str) -> None:
    """The sender's ``get()`` raises the refusal: the worker stored it as the result (a message left
    unanswered would end in ``get``'s timeout, its ceiling, with a ``TimeoutError`` instead)."""
    try:
        with pytest.raises(InvalidTaskError, match=reason):
            rig.app.AsyncResult(task_id).get(timeout=15)
    except BaseException as error:
        error.add_note(f"worker log tail:\n{rig.worker.log_text()[-4000:]}")
        raise


def assert_worker_still_works(rig: EdgeRig) -> None:
    assert rig.worker.is_alive(), rig.worker.log_text()[-3000:]
    result = rig.app.send_task("agentloop.launch", kwargs={"runnable": "parity.count", "input": 2})
    assert result.get(timeout=30) is not None
    assert rig.worker.is_alive()


def assert_failed_run(rig: EdgeRig, run_id: str, *, reason: str) -> None:
    record = rig.store.get_run(run_id)
    assert record is not None and record.status == "failed", record
    assert record.error["type"] == "InvalidTaskError"
    assert reason in record.error["message"]


POISON_BODIES = {
    "an object body": {"a": 1},
    "a list body whose kwargs are a list": [[], [1, 2], {}],
    "a two-item body": [[], {}],
    "a string body": "launch please",
    "args that are a number": [5, {}, {}],
    "an embed that is a list": [[], {"runnable": "parity.count", "input": 1}, [1]],
}


@pytest.mark.parametrize("body", POISON_BODIES.values(), ids=POISON_BODIES.keys())
def test_a_launch_whose_body_is_not_the_protocol_triple_is_a_failed_run(edge_rig: EdgeRig, body: Any) -> None:
    run_id = send_raw(edge_rig.app, name="agentloop.launch", body=body)

    assert_rejected_promptly(edge_rig, run_id, reason="not a task protocol 2 body")
    assert_failed_run(edge_rig, run_id, reason="not a task protocol 2 body")
    assert_worker_still_works(edge_rig)


def test_kwargs_nested_900_levels_deep_are_refused_before_the_pool_pickles_them(edge_rig: EdgeRig) -> None:
    run_id = f"deep-{uuid.uuid4()}"
    result = edge_rig.app.send_task(
        "agentloop.launch",
        kwargs={"runnable": "parity.count", "input": nested(900), "run_id": run_id},
        task_id=run_id,
    )

    assert_rejected_promptly(edge_rig, result.id, reason="nested deeper than 64")
    assert_failed_run(edge_rig, run_id, reason="nested deeper than 64")
    assert_worker_still_works(edge_rig)


def test_kwargs_nested_just_within_the_limit_still_run(edge_rig: EdgeRig) -> None:
    result = edge_rig.app.send_task("agentloop.launch", kwargs={"runnable": "edge.echo", "input": nested(60)})
    assert result.get(timeout=30) == nested(60)


def test_a_body_over_the_size_limit_is_refused(edge_rig: EdgeRig) -> None:
    big = "x" * (9 * 1024 * 1024)
    result = edge_rig.app.send_task("agentloop.launch", kwargs={"runnable": "parity.count", "input": big})

    assert_rejected_promptly(edge_rig, result.id, reason="larger than")
    assert_failed_run(edge_rig, result.id, reason="larger than")
    assert_worker_still_works(edge_rig)


UNDECODABLE = {
    "JSON too deep for the decoder": (deep_json(100_000), "application/json"),
    "pickle": (
        b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00]\x94(]\x94}\x94}\x94e.",
        "application/x-python-serialize",
    ),
    "YAML": (b"- []\n- {runnable: parity.count, input: 1}\n- {}\n", "application/x-yaml"),
    "bytes that are not UTF-8": (b"\xff\xfe\x00garbage", "application/json"),
}


@pytest.mark.parametrize(("body", "content_type"), UNDECODABLE.values(), ids=UNDECODABLE.keys())
def test_a_message_the_worker_cannot_decode_fails_its_sender_at_once(
    edge_rig: EdgeRig, body: bytes, content_type: str
) -> None:
    run_id = send_raw(edge_rig.app, name="agentloop.launch", body=body, content_type=content_type)

    assert_rejected_promptly(edge_rig, run_id, reason="cannot be decoded")
    assert_failed_run(edge_rig, run_id, reason="cannot be decoded")
    assert_worker_still_works(edge_rig)


def test_a_poison_message_of_another_task_fails_only_its_own_result(edge_rig: EdgeRig) -> None:
    task_id = send_raw(edge_rig.app, name="agentloop.progress", body={"a": 1})

    assert_rejected_promptly(edge_rig, task_id, reason="not a task protocol 2 body")
    assert edge_rig.store.get_run(task_id) is None
    assert_worker_still_works(edge_rig)


BAD_HEADERS = {
    "a task name that is a list": {"task": ["agentloop.launch"]},
    "headers nested 900 levels deep": {"x-deep": nested(900)},
    "a time limit that is a word": {"timelimit": "soon"},
}


@pytest.mark.parametrize("headers", BAD_HEADERS.values(), ids=BAD_HEADERS.keys())
def test_headers_the_worker_cannot_use_do_not_stop_it(edge_rig: EdgeRig, headers: dict[str, Any]) -> None:
    send_raw(
        edge_rig.app,
        name="agentloop.launch",
        body=[[], {"runnable": "parity.count", "input": 1}, {}],
        headers=headers,
    )
    assert_worker_still_works(edge_rig)


def test_a_launch_whose_id_is_a_finished_run_leaves_that_run_alone(edge_rig: EdgeRig) -> None:
    result = edge_rig.app.send_task("agentloop.launch", kwargs={"runnable": "parity.count", "input": 1})
    value = result.get(timeout=30)
    before = edge_rig.store.get_run(result.id)

    send_raw(edge_rig.app, name="agentloop.launch", body={"a": 1}, task_id=result.id)
    assert_worker_still_works(edge_rig)

    assert edge_rig.store.get_run(result.id) == before
    assert edge_rig.app.AsyncResult(result.id).get(timeout=5) == value


def test_a_message_celery_itself_finds_invalid_fails_its_sender_too(edge_rig: EdgeRig) -> None:
    body = [[], {"runnable": "parity.count", "input": 1}, {}]
    run_id = send_raw(edge_rig.app, name="agentloop.launch", body=body, headers={"eta": "tomorrow"})

    assert_rejected_promptly(edge_rig, run_id, reason="invalid ETA value 'tomorrow'")
    assert_failed_run(edge_rig, run_id, reason="invalid ETA value")
    assert_worker_still_works(edge_rig)

"""The wire contract's concurrency keys and priorities (issue 39): extended, never broken. A message
that carries neither says wire version 1 as before; one that carries either says 2, so a worker of
an older release parks it for a newer one instead of refusing the launch or running a node
unlimited."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.wire_versions import too_new
from agentloop.orchestration.errors import LaunchRequestError
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import (
    KEYS_VERSION,
    WIRE_HEADER,
    Ancestor,
    LaunchRequest,
    WorkflowNode,
    needed_version,
)

MEMORY = {"broker_url": "memory://", "result_backend": "cache+memory://"}


def test_a_launch_takes_a_key_and_a_priority_and_refuses_bad_ones_clearly() -> None:
    request = LaunchRequest.parse(runnable="r", concurrency_key="tenant-1", priority=3)
    assert (request.concurrency_key, request.priority) == ("tenant-1", 3)
    assert request.to_kwargs() == {
        "runnable": "r", "input": None, "context": {}, "concurrency_key": "tenant-1", "priority": 3,
    }  # fmt: skip
    assert "concurrency_key" not in LaunchRequest.parse(runnable="r").to_kwargs()
    for bad, message in (
        ({"concurrency_key": ""}, "concurrency_key must be a non-empty string"),
        ({"concurrency_key": "x" * 256}, "at most 255"),
        ({"priority": 10}, "from 0 to 9"),
        ({"priority": True}, "from 0 to 9"),
        ({"priority": "1"}, "from 0 to 9"),
    ):
        with pytest.raises(LaunchRequestError, match=message):
            LaunchRequest.parse(runnable="r", **bad)


def test_every_branch_and_stage_inherits_the_runs_key_and_priority() -> None:
    root = WorkflowNode(run_id="r1", runnable="fan", concurrency_key="tenant-1", priority=2)
    parent = Ancestor(kind="composite", runnable="fan", path="", position="0", width=2)
    child = root.child(runnable="leaf", segment="branch/0", parent=parent)
    assert (child.concurrency_key, child.priority) == ("tenant-1", 2)
    again = WorkflowNode.from_dict(child.to_dict())
    assert (again.concurrency_key, again.priority) == ("tenant-1", 2)
    assert "concurrency_key" not in WorkflowNode(run_id="r2", runnable="x").to_dict()  # as version 1 wrote it


def test_only_a_message_carrying_a_key_or_a_priority_needs_version_2() -> None:
    node = WorkflowNode(run_id="r1", runnable="x").to_dict()
    keyed = WorkflowNode(run_id="r1", runnable="x", concurrency_key="t").to_dict()
    assert needed_version((), {"runnable": "x", "input": None}) == 1
    assert needed_version((node,), {}) == 1
    assert needed_version((), {"runnable": "x", "concurrency_key": "t"}) == KEYS_VERSION
    assert needed_version((), {"runnable": "x", "priority": 0}) == KEYS_VERSION
    assert needed_version(([], keyed), {}) == KEYS_VERSION  # a pack's node, after its collected list
    assert needed_version((), {"node": keyed}) == KEYS_VERSION


def _app(**settings: str) -> Any:
    return create_app(
        settings=load_settings(settings),
        store=InMemoryRunStore(),
        overrides={**MEMORY, "task_default_queue": f"keys-{uuid.uuid4().hex[:8]}"},
    )


def test_the_producer_stamps_what_the_message_needs_and_an_older_worker_parks_only_those() -> None:
    app = _app()
    try:
        plain = app.amqp.as_task_v2(str(uuid.uuid4()), "agentloop.launch", (), {"runnable": "x"})
        keyed = app.amqp.as_task_v2(
            str(uuid.uuid4()), "agentloop.launch", (), {"runnable": "x", "concurrency_key": "t"}
        )
        assert (plain.headers[WIRE_HEADER], keyed.headers[WIRE_HEADER]) == (1, 2)
        older = 1  # a worker of a release before issue 39 reads up to version 1
        assert too_new(plain.headers, older) is None  # it runs the plain launch as always
        assert too_new(keyed.headers, older) == 2  # and parks the keyed one for a newer worker
        assert too_new(keyed.headers, 2) is None
    finally:
        app.close()
    rehearsal = _app(AGENTLOOP_WIRE_VERSION_OVERRIDE="3")
    try:  # a rehearsal's override stamps every message with it
        message = rehearsal.amqp.as_task_v2(str(uuid.uuid4()), "agentloop.stage", (), {})
        assert message.headers[WIRE_HEADER] == 3
    finally:
        rehearsal.close()


def test_a_batch_chunk_under_a_key_is_version_2() -> None:
    chunk_args = ("b1", "r", [1, 2], 0, {}, None)
    assert needed_version(chunk_args, {"concurrency_key": "t"}) == KEYS_VERSION
    assert needed_version(chunk_args, {}) == 1


def test_a_keyed_runs_branch_tasks_are_version_2_so_the_last_release_never_runs_them_unslotted() -> None:
    """Branch limits ship with keys, at wire version 2: a worker of 0.1.0 (version 1), which
    knows no branch slot, parks every task of a keyed run's branch (a task, a pack, joined
    stages) for a newer worker (``docs/how-to/fairness.md``, rolling deploys)."""
    root = WorkflowNode(run_id="r1", runnable="fan", concurrency_key="tenant-1")
    parent = Ancestor(kind="composite", runnable="fan", path="", position="0", width=2)
    branch = root.child(runnable="leaf", segment="branch/0", parent=parent).to_dict()
    app = _app()
    try:
        sent = [
            app.amqp.as_task_v2(str(uuid.uuid4()), name, args, {})
            for name, args in (("agentloop.run", (branch,)), ("agentloop.pack", ([], branch)))
        ]
        assert [message.headers[WIRE_HEADER] for message in sent] == [KEYS_VERSION, KEYS_VERSION]
        assert [too_new(message.headers, 1) for message in sent] == [KEYS_VERSION, KEYS_VERSION]
    finally:
        app.close()

"""Durable loops on Celery: a loop redelivered after its worker died resumes from its last
finished iteration; a redelivered task that already finished is not run again; state that
JSON cannot carry is a clear error."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from agentloop.actions import StateNotSerializableError
from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.runtime.next_step import Done
from agentloop.orchestration.store import RunStore, open_store
from agentloop.orchestration.wire import WorkflowNode
from tests.services.redis_server import ServiceUnavailable, private_redis_server
from tests.services.worker import run_worker_process

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent


@pytest.fixture
def durable(sqlite_run_store: RunStore) -> RunStore:
    return sqlite_run_store


def engine(store: RunStore) -> WorkflowEngine:
    return WorkflowEngine(registry=RunnableRegistry.from_modules(["workflows.durable"]), store=store)


def test_a_redelivered_task_that_already_finished_is_not_run_again(durable: RunStore, tmp_path: Path) -> None:
    log = tmp_path / "iterations.log"
    node = WorkflowNode(
        run_id="r-done", runnable="durable.slow_count", context={"log": str(log), "step_seconds": 0}
    )
    durable.create_run(run_id="r-done", runnable="durable.slow_count", input=3)
    executor = engine(durable)

    first = asyncio.run(executor.start(node, 3))
    events_after_first = len(durable.events("r-done"))
    second = asyncio.run(executor.start(node, 3))

    assert isinstance(first, Done) and isinstance(second, Done)
    assert first.value == second.value == {"counted": 3}
    assert log.read_text().count("\n") == 3  # the second delivery ran no iteration
    assert len(durable.events("r-done")) == events_after_first


@pytest.mark.parametrize("runnable", ["durable.slow_count", "durable.typed_slow_count"])
def test_a_loop_resumes_from_its_last_checkpoint(durable: RunStore, tmp_path: Path, runnable: str) -> None:
    log = tmp_path / "iterations.log"
    node = WorkflowNode(run_id="r-resume", runnable=runnable, context={"log": str(log), "step_seconds": 0})
    durable.create_run(run_id="r-resume", runnable=runnable, input=5)
    durable.save_checkpoint("r-resume", "", 3, {"goal": 5, "n": 3})

    answer = asyncio.run(engine(durable).start(node, 5))

    assert isinstance(answer, Done) and answer.value == {"counted": 5}
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["3", "4"]
    phases = [(e["phase"], e["data"]) for _, e in durable.events("r-resume")][:1]
    assert phases == [("resume", {"resumed_from": 3})]


def test_state_that_is_not_json_is_a_clear_error_when_durable(durable: RunStore) -> None:
    node = WorkflowNode(run_id="r-set", runnable="durable.not_json_state", context={"step_seconds": 0})
    durable.create_run(run_id="r-set", runnable="durable.not_json_state", input=2)
    with pytest.raises(StateNotSerializableError, match="set"):
        asyncio.run(engine(durable).start(node, 2))
    record = durable.get_run("r-set")
    assert record is not None and record.status == "failed"
    assert record.error["type"] == "StateNotSerializableError"


@pytest.mark.integration
@pytest.mark.parametrize("runnable", ["durable.slow_count", "durable.typed_slow_count"])
def test_a_loop_whose_worker_died_resumes_on_another_worker(tmp_path: Path, runnable: str) -> None:
    import workflows.durable  # noqa: F401

    log = tmp_path / "iterations.log"
    database_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    store, _ = open_store(database_url)
    env = {
        "DATABASE_URL": database_url,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
        # Limits that fit this 4 s loop, and a visibility timeout just above them, so the
        # message the dead worker never acknowledged comes back within seconds.
        "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "5",
        "AGENTLOOP_TASK_TIME_LIMIT": "6",
        "AGENTLOOP_VISIBILITY_TIMEOUT": "7",
        "AGENTLOOP_UNACKED_RESTORE_SECONDS": "1",
    }
    try:
        server_cm = private_redis_server()
        server = server_cm.__enter__()
    except ServiceUnavailable as unavailable:
        pytest.skip(unavailable.reason)
    try:
        _run_kill_and_resume(server.url, env, store, log, runnable)
    finally:
        server_cm.__exit__(None, None, None)


def _run_kill_and_resume(url: str, env: dict[str, str], store: RunStore, log: Path, runnable: str) -> None:
    app = create_app(overrides={"broker_url": url, "result_backend": url})
    context = {"log": str(log), "step_seconds": 0.3}
    with run_worker_process(
        broker_url=url, result_backend=url, imports=["workflows.durable"], env=env, concurrency=1
    ) as first:
        handle = CeleryAgentRunner.create(
            runnable=runnable, context=context, app=app, store=store
        ).request_sync(input=12)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not log.exists() or log.read_text().count("\n") < 4):
            time.sleep(0.05)
        assert log.read_text().count("\n") >= 4, first.log_text()[-2000:]
        first_pids = {int(line.split()[1]) for line in log.read_text().splitlines()}
        # the iterations so far ran in the first worker's pool (its process group)
        assert {os.getpgid(pid) for pid in first_pids} == {first.pid}
        first.kill(signal.SIGKILL)
        first.wait(10)
    done_before = [int(line.split()[0]) for line in log.read_text().splitlines()]
    with run_worker_process(
        broker_url=url, result_backend=url, imports=["workflows.durable"], env=env, concurrency=1
    ) as second:
        result = handle.wait_sync(timeout=90)
        lines = [line.split() for line in log.read_text().splitlines()]
        later_pids = {int(pid) for _, pid in lines} - first_pids
        # ... and the rest in the second worker's pool, while it is still up to be asked
        assert later_pids and {os.getpgid(pid) for pid in later_pids} == {second.pid}, lines
    app.close()

    assert result == {"counted": 12}
    resumed = [int(i) for i, pid in lines if int(pid) in later_pids]
    # The second worker went on from a checkpoint: it did not start again at iteration 0 (which
    # checkpoint is the last depends on when the kill lands: checkpoints are at least 0.5 s apart,
    # AGENTLOOP_CHECKPOINT_SECONDS, and a step takes 0.3 s) ...
    assert resumed and resumed[0] >= 1 and resumed[0] <= max(done_before) + 1, lines
    # ... and between them every iteration ran; twice only those done after that checkpoint:
    # two at most, for a step sleeps 0.3 s and the next checkpoint is due 0.5 s after one.
    assert sorted(set(int(i) for i, _ in lines)) == list(range(12))
    repeated = max(done_before) + 1 - resumed[0]
    assert len(lines) == 12 + repeated and repeated <= 2, lines
    phases = [e["phase"] for _, e in store.events(handle.run_id) if e["path"] == ""]
    assert phases[0] == "start" and "resume" in phases and phases[-1] == "done"

"""A prefork worker keeps a spare process for what arrives while packs fill its others
(``celery_adapter/pack_gate.py``), and ``-c N`` still bounds every task that is not a pack.

- ``-c 2``: three processes, at most two packs at once; a run launched while two packs hold their
  processes runs on the third at once, instead of waiting in the broker for a pack to end.
- ``-c 1``: two processes, but one launch at a time while no pack runs (a second waits in the
  broker), and beside a pack one launch more, never two.

The held runs (``gate.held``) end when the test writes the file their context names: the verdicts
are counts (runs running, the worker's prefetch) and the order of events, never times (the waits
are ceilings; the one window in which nothing may start is a bound on what is observed)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.batches import summarize
from agentloop.orchestration.store import RunStore, open_store
from agentloop.orchestration.wire import BATCH, LAUNCH
from tests.services.redis_server import RedisServer, ServiceUnavailable, private_redis_server
from tests.services.worker import WorkerProcess, run_worker_process

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
T = TypeVar("T")
#: How long a second launch is watched for not starting on a worker of ``-c 1`` (s): with a
#: prefetch of 2 it starts within milliseconds.
QUIET_WINDOW = 1.0
#: A batch's summary's countdown (s): it waits in the worker, unchanged, for the whole test (so
#: the batch's own record stays open: each test's batches have a key of their own, which a batch
#: still open does not hold up).
POLL_SECONDS = 300.0


def wait_for(check: Callable[[], T | None], *, ceiling: float, what: str) -> T:
    deadline = time.monotonic() + ceiling  # a ceiling: the verdicts are counts
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {ceiling} s")


@contextmanager
def gated_worker(
    tmp_path: Path, concurrency: int, *, restartable: bool = False
) -> Iterator[tuple[Any, RunStore, WorkerProcess, RedisServer]]:
    """A prefork worker of ``-c concurrency`` on a private Redis, the client app, the store and
    the server (``restartable``: with its queues kept on disk). The time limits are the defaults:
    a batch's runs are packed only under those (``docs/how-to/packing.md#the-rule``)."""
    database_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    store, _ = open_store(database_url)
    env = {"DATABASE_URL": database_url, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    try:
        server_cm = private_redis_server(appendonly=restartable)
        server = server_cm.__enter__()
    except ServiceUnavailable as unavailable:
        pytest.skip(unavailable.reason)
    try:
        with run_worker_process(
            broker_url=server.url, result_backend=server.url, imports=["workflows.pack_gate"],
            env=env, concurrency=concurrency, pool="prefork",
        ) as worker:  # fmt: skip
            app = create_app(overrides={"broker_url": server.url, "result_backend": server.url})
            try:
                yield app, store, worker, server
            finally:
                app.close()
    finally:
        server_cm.__exit__(None, None, None)
        store.engine.dispose()


Rig = tuple[Any, RunStore, WorkerProcess, RedisServer]


@pytest.fixture(scope="module")
def c2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A worker of ``-c 2``, shared by the tests of this module (each leaves it idle)."""
    with gated_worker(tmp_path_factory.mktemp("c2"), 2) as rig:
        yield rig


@pytest.fixture(scope="module")
def c1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A worker of ``-c 1`` on a Redis the test may restart, shared likewise."""
    with gated_worker(tmp_path_factory.mktemp("c1"), 1, restartable=True) as rig:
        yield rig


def stats(app: Any, worker: WorkerProcess) -> tuple[int, int]:
    """The worker's pool processes and its prefetch (messages it may hold unacknowledged), less
    the one Celery adds for each message it holds until its countdown (a batch's summary, sent
    again every ``poll_seconds``: :data:`POLL_SECONDS`, longer than the test)."""
    inspect = app.control.inspect([worker.hostname], timeout=10)
    found = inspect.stats()[worker.hostname]
    waiting = len(inspect.scheduled()[worker.hostname])
    return len(found["pool"]["processes"]), int(found["prefetch_count"]) - waiting


def settles_at(store: RunStore, run_ids: list[str], count: int, what: str) -> None:
    """Once ``count`` of ``run_ids`` run, no other starts while :data:`QUIET_WINDOW` is watched."""
    wait_for(lambda: True if running(store, run_ids) >= count else None, ceiling=60, what=f"{count} running")
    deadline = time.monotonic() + QUIET_WINDOW
    while time.monotonic() < deadline:
        assert running(store, run_ids) == count, what
        time.sleep(0.05)


def ended(store: RunStore, run_ids: list[str]) -> bool | None:
    return True if all((r := store.get_run(i)) is not None and r.is_finished for i in run_ids) else None


def launch_held(app: Any, release: Path) -> str:
    run_id = f"gate-{uuid.uuid4().hex[:12]}"
    context = {"release": str(release)}
    app.send_task(LAUNCH, kwargs={"runnable": "gate.held", "input": 1, "run_id": run_id, "context": context})
    return run_id


def prefetch_back_to(app: Any, worker: WorkerProcess, prefetch: int) -> tuple[int, int]:
    """:func:`stats`, once the worker's prefetch is ``prefetch``."""
    return wait_for(
        lambda: found if (found := stats(app, worker))[1] == prefetch else None,
        ceiling=60,
        what=f"prefetch back to {prefetch}",
    )


def batch_ended(store: RunStore, batch_id: str) -> dict[str, Any]:
    """The batch's summary, once none of its runs is open."""
    return wait_for(
        lambda: s if (s := summarize(store, batch_id))["open"] == 0 else None,
        ceiling=60,
        what="the batch ended",
    )


def running(store: RunStore, run_ids: list[str]) -> int:
    records = [store.get_run(run_id) for run_id in run_ids]
    return sum(1 for record in records if record is not None and record.status == "running")


def batch_running(store: RunStore, batch_id: str) -> int:
    return int(summarize(store, batch_id)["by_status"].get("running", 0))


def held_batch(app: Any, store: RunStore, tmp_path: Path, release: Path, *, inputs: int, running: int) -> str:
    """A batch of ``inputs`` held runs in packs of four, under a key of the test's own; its id,
    once ``running`` of its runs run."""
    batch_id: str = app.send_task(
        BATCH,
        kwargs={
            "runnable": "gate.held",
            "inputs": list(range(inputs)),
            "chunk_size": 4,  # a chunk is one pack of four runs
            "context": {"release": str(release)},
            "poll_seconds": POLL_SECONDS,
            "key": tmp_path.name,
        },
    ).get(timeout=30)["batch_id"]
    wait_for(
        lambda: True if batch_running(store, batch_id) >= running else None,
        ceiling=60,
        what=f"{running} of the batch's runs running",
    )
    return batch_id


def launches_beside_one_pack(
    rig: Rig, tmp_path: Path, concurrency: int, packed: Path, held: Path, too_many: str
) -> None:
    """One pack held on a worker of ``-c concurrency``: it takes one message more (its prefetch
    ``concurrency + 1``), runs ``concurrency`` of ``concurrency + 1`` held launches beside the pack
    (``too_many``: what running all of them would be), still ``concurrency`` once the pack ends and
    its message's place goes back, and its prefetch is ``concurrency`` again after."""
    app, store, worker, _ = rig
    batch_id = held_batch(app, store, tmp_path, packed, inputs=4, running=4)  # one pack
    assert stats(app, worker) == (concurrency + 1, concurrency + 1)  # one pack: one message more
    launches = [launch_held(app, held) for _ in range(concurrency + 1)]
    settles_at(store, launches, concurrency, f"beside a pack, a worker of -c {concurrency} {too_many}")
    packed.write_text("go")
    batch_ended(store, batch_id)
    assert running(store, launches) == concurrency
    held.write_text("go")
    wait_for(lambda: ended(store, launches), ceiling=60, what="the launches beside the pack ended")
    assert prefetch_back_to(app, worker, concurrency) == (concurrency + 1, concurrency)


def test_a_launch_runs_while_packs_hold_every_process_they_may_take(tmp_path: Path, c2: Rig) -> None:
    release = tmp_path / "release"
    app, store, worker, _ = c2
    assert stats(app, worker) == (3, 2)  # -c 2: a spare process, a prefetch of 2
    batch_id = held_batch(app, store, tmp_path, release, inputs=12, running=8)  # three packs, two running
    assert stats(app, worker) == (3, 3)  # two packs: one message more, for what is not a pack
    # while two packs hold their processes, a launch runs on the third
    launch = app.send_task(LAUNCH, kwargs={"runnable": "gate.quick", "input": 7})
    assert launch.get(timeout=60) == 7
    # and the third pack was not taken meanwhile: it waits for a pack's process
    assert batch_running(store, batch_id) == 8
    assert int(summarize(store, batch_id)["by_status"].get("pending", 0)) == 4
    release.write_text("go")
    state = batch_ended(store, batch_id)
    # the message taken beside the packs is given back once they end
    assert prefetch_back_to(app, worker, 2) == (3, 2)
    assert (state["total"], state["succeeded"]) == (12, 12)


def test_c_1_runs_one_task_that_is_not_a_pack_at_a_time_beside_a_pack_or_not(tmp_path: Path, c1: Rig) -> None:
    """What failed with a spare process that took any task: two launches at once on ``-c 1``."""
    first, second, packed = tmp_path / "first", tmp_path / "second", tmp_path / "packed"
    app, store, worker, _ = c1
    assert stats(app, worker) == (2, 1)
    # no pack: one launch runs, the next waits in the broker though a process is free
    alone = [launch_held(app, first), launch_held(app, first)]
    settles_at(store, alone, 1, "a worker of -c 1 ran two launches at once")
    first.write_text("go")
    wait_for(lambda: ended(store, alone), ceiling=60, what="both launches ended")

    # a pack holds the process -c 1 gives: one launch more runs beside it, not two
    launches_beside_one_pack(c1, tmp_path, 1, packed, second, "ran two launches")


def test_c_2_runs_two_tasks_that_are_not_packs_beside_one_pack_not_three(tmp_path: Path, c2: Rig) -> None:
    """Beside one pack the worker takes one message more than -c 2: three in all, two of them
    launches; a third launch waits for one of them (or the pack) to end."""
    launches_beside_one_pack(c2, tmp_path, 2, tmp_path / "packed", tmp_path / "held", "ran three launches")


def test_the_bound_comes_back_after_a_broker_restart_while_a_pack_holds(tmp_path: Path, c1: Rig) -> None:
    """A reconnect makes the consumer and its prefetch anew: the gate counts the pack that ran
    through it, gives its extra message back when the pack ends (its acknowledgement lost with the
    old connection), and ``-c 1`` runs one launch at a time again; no run is lost."""
    packed, after = tmp_path / "packed", tmp_path / "after"
    app, store, worker, server = c1
    if not server.restartable:
        pytest.skip("this Redis server cannot be restarted by the test")
    batch_id = held_batch(app, store, tmp_path, packed, inputs=4, running=4)  # one pack
    assert stats(app, worker) == (2, 2)
    server.restart()
    # the new consumer: the pack still holds the process -c 1 gives, so one message more
    seen: list[tuple[int, int] | None] = []
    try:
        wait_for(
            lambda: True if _stats_or_none(app, worker, seen) == (2, 2) else None,
            ceiling=60,
            what="the worker back, a pack held",
        )
    except AssertionError as missed:
        raise AssertionError(f"{missed}; the worker's answers: {seen[-5:]}") from None
    packed.write_text("go")
    state = batch_ended(store, batch_id)
    assert (state["total"], state["succeeded"]) == (4, 4)
    # the pack's acknowledgement went with the old connection (its message comes back after
    # the visibility timeout, past this test, and runs nothing): the prefetch is -c 1's again
    launches = [launch_held(app, after), launch_held(app, after)]
    settles_at(store, launches, 1, "after a reconnect, a worker of -c 1 ran two launches at once")
    after.write_text("go")
    wait_for(lambda: ended(store, launches), ceiling=60, what="the launches ended")
    assert prefetch_back_to(app, worker, 1) == (2, 1)
    assert worker.is_alive()
    assert "Unrecoverable error" not in worker.log_text()


def _stats_or_none(
    app: Any, worker: WorkerProcess, seen: list[tuple[int, int] | None]
) -> tuple[int, int] | None:
    """:func:`stats`, or ``None`` while the worker does not answer (it is reconnecting); each
    answer is appended to ``seen``."""
    try:
        found: tuple[int, int] | None = stats(app, worker)
    except (KeyError, TypeError, OSError, RedisError, OperationalError):
        found = None
    seen.append(found)
    return found

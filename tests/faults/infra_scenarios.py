"""Faults of the infrastructure under runs in flight: the worker killed, one pool process killed,
a task killed at its hard time limit, Redis restarted, PostgreSQL refusing connections.

Each launches the mixed workload, waits until runs are mid-flight, strikes, and then waits for
every run to end. Runs survive a killed worker, a killed pool process and a Redis restart
(late acknowledgement, checkpoints): all must complete. A short database outage is ridden out
by the store's retries (``AGENTLOOP_STORE_RETRY_SECONDS``, 60 s by default): all complete. A
minute-long one may outlast them: then every run still ends, failed with a reason, marked so by
whatever path still reaches the store.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from sqlalchemy import select

from agentloop.orchestration.store.tables import runs as runs_table
from agentloop.orchestration.store.waits import ANSWERED, SqlWaitStore
from agentloop.orchestration.wire import RESUME

from .rig import LONG, SHORT, FaultRig
from .tally import Outcome, ScenarioResult, settle
from .workload import ScenarioFn, Size, launch_mix


def _start(rig: FaultRig, result: ScenarioResult, size: Size) -> dict[str, str]:
    runs = launch_mix(rig, size.runs)
    if not rig.wait_running(list(runs), timeout=30):
        result.problems.append("no run had started 30 s after launch")
    time.sleep(0.3)  # a little into the runs: a loop or two mid-iteration
    return runs


def worker_sigkill(rig: FaultRig, size: Size) -> ScenarioResult:
    """The worker and its pool get SIGKILL (the machine died); a new worker takes over."""
    result = ScenarioResult(name="worker SIGKILLed")
    rig.use_profile(SHORT)
    runs = _start(rig, result, size)
    assert rig.worker is not None
    rig.worker.kill(signal.SIGKILL)
    rig.worker.wait(10)
    rig.start_worker(SHORT)
    result.runs = settle(rig.store, rig.app, runs, bound=size.bound)
    result.expect(result.runs.values(), [Outcome.COMPLETED], "runs resume from their checkpoints")
    return result


def pool_child_killed(rig: FaultRig, size: Size) -> ScenarioResult:
    """One pool process gets SIGKILL mid-task; the worker replaces it and the task comes back."""
    result = ScenarioResult(name="pool child killed")
    rig.use_profile(SHORT)
    runs = _start(rig, result, size)
    children = rig.pool_children()
    if children:
        os.kill(children[0], signal.SIGKILL)
    else:
        result.problems.append("the worker had no pool process to kill")
    result.runs = settle(rig.store, rig.app, runs, bound=size.bound, alive=rig.worker_ok)
    result.expect(result.runs.values(), [Outcome.COMPLETED], "the lost task is delivered again")
    return result


def broker_restarted(rig: FaultRig, size: Size) -> ScenarioResult:
    """The broker restarts under the runs: Redis (broker and results, append-only), or the private
    RabbitMQ node (its quorum queues on disk; results stay in Redis)."""
    result = ScenarioResult(name=f"{rig.broker.label} restarted")
    rig.use_profile(SHORT)
    runs = _start(rig, result, size)
    rig.broker.restart()
    result.runs = settle(rig.store, rig.app, runs, bound=size.bound + 60, alive=rig.worker_ok)
    result.expect(result.runs.values(), [Outcome.COMPLETED], "the worker reconnects and goes on")
    _no_dead_letters(rig, result)
    return result


def connection_dropped(rig: FaultRig, size: Size) -> ScenarioResult:
    """The worker's broker connections are reset (and refused for 1 s) under the runs: its
    unacknowledged messages go back to the queue at once (RabbitMQ), its running tasks go on."""
    result = ScenarioResult(name="consumer connection dropped")
    rig.use_profile(SHORT)
    runs = _start(rig, result, size)
    rig.broker.drop_connections(1.0)
    result.runs = settle(rig.store, rig.app, runs, bound=size.bound, alive=rig.worker_ok)
    result.expect(result.runs.values(), [Outcome.COMPLETED], "the worker reconnects; nothing runs twice")
    _no_dead_letters(rig, result)
    return result


def _no_dead_letters(rig: FaultRig, result: ScenarioResult) -> None:
    dead = rig.broker.dead_letters()
    if dead:
        result.problems.append(f"{dead} messages were dead-lettered past their delivery limit")


def hard_time_limit(rig: FaultRig, size: Size) -> ScenarioResult:
    """A run swallows its soft time limit and is killed at the hard one (the worker's main process
    ends it, then forks new pool children); the mixed workload runs after it, on those children."""
    result = ScenarioResult(name="hard time limit kill")
    rig.use_profile(SHORT)
    killed = {rig.launch("durable.swallows_its_time_limit", 1): "durable.swallows_its_time_limit#killed"}
    result.runs = settle(rig.store, rig.app, killed, bound=size.bound, alive=rig.worker_ok)
    result.expect(result.runs.values(), [Outcome.FAILED], "the hard time limit ends the run, with its reason")
    runs = launch_mix(rig, size.runs)
    after = settle(rig.store, rig.app, runs, bound=size.bound, alive=rig.worker_ok)
    result.expect(after.values(), [Outcome.COMPLETED], "runs after the kill share no database connection")
    result.runs.update(after)
    return result


def postgres_outage(seconds: float) -> ScenarioFn:
    """The scenario where the run store's database refuses connections for ``seconds``."""
    name = f"PostgreSQL refusing {seconds:g} s"

    def run(rig: FaultRig, size: Size) -> ScenarioResult:
        result = ScenarioResult(name=name)
        rig.use_profile(LONG)
        runs = _start(rig, result, size)
        with rig.proxy.refusing():
            # more runs arrive while the database is down: queued, or taken and failing to start
            runs.update(launch_mix(rig, max(2, size.runs // 2), start=size.runs))
            time.sleep(seconds)
        result.runs = settle(rig.store, rig.app, runs, bound=size.bound + 60, alive=rig.worker_ok)
        if seconds < 30:
            allowed = [Outcome.COMPLETED]
            why = "store writes are retried through a short outage"
        else:
            allowed = [Outcome.COMPLETED, Outcome.FAILED]
            why = "a run the retries could not save is still marked ended, with its error"
        result.expect(result.runs.values(), allowed, why)
        return result

    return run


def answered_then_killed(rig: FaultRig, size: Size) -> ScenarioResult:
    """Runs paused for a person's answer are answered while the test holds their rows, so each
    resume has settled its wait and waits to mark its run running; then the worker and its pool
    get SIGKILL, the rows are let go, and a new worker takes over (issue 21: the runs stayed
    ``waiting`` forever, their waits ``answered``, the redelivered resumes refused).

    Every run must complete, each with its one answer, its paused task sent on once."""
    result = ScenarioResult(name="worker SIGKILLed between an answer's writes")
    rig.use_profile(SHORT)
    runs = {rig.launch("human.approve", f"ask {i}"): "human.approve" for i in range(max(2, size.runs // 2))}
    waits = SqlWaitStore(rig.store.engine)
    if not _wait_for(lambda: all(_status(rig, run_id) == "waiting" for run_id in runs), 30):
        result.problems.append("not every run was waiting for its answer 30 s after launch")
    with rig.store.engine.connect() as held, held.begin():
        held.execute(select(runs_table.c.id).where(runs_table.c.id.in_(list(runs))).with_for_update())
        for run_id in runs:
            rig.app.send_task(RESUME, kwargs={"run_id": run_id, "answer": True})
        answered = lambda: sum(1 for run_id in runs for w in waits.waits(run_id) if w.status == ANSWERED)  # noqa: E731
        if not _wait_for(lambda: answered() >= 2, 30):
            result.problems.append(f"only {answered()} answers were settled before the strike")
        assert rig.worker is not None
        rig.worker.kill(signal.SIGKILL)
        rig.worker.wait(10)
    rig.start_worker(SHORT)
    result.runs = settle(rig.store, rig.app, runs, bound=size.bound)
    result.expect(
        result.runs.values(), [Outcome.COMPLETED], "a settled answer is sent on by its redelivered resume"
    )
    for run_id in runs:
        found = [(w.status, w.answer, w.resumed) for w in waits.waits(run_id)]
        if found != [(ANSWERED, True, True)]:
            result.problems.append(
                f"run {run_id[:8]}: its wait is {found}, expected one answer, resumed once"
            )
    return result


def _status(rig: FaultRig, run_id: str) -> str | None:
    record = rig.store.get_run(run_id)
    return None if record is None else record.status


def _wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True

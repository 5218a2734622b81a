"""Several worker hosts on one broker (issue 25): three workers, each its own node name (``w1@host``,
``w2@host``, ``w3@host``) and prefork pool, share a batch of 2,000 runs; one is SIGKILLed with its
pool mid-batch and not replaced. The other two must finish the batch: every run succeeded, none
lost or stuck, and no iteration run twice past a checkpoint (checkpoints after every iteration,
``AGENTLOOP_CHECKPOINT_SECONDS=0``: only the iteration a killed process was in may run again).

:func:`measure_throughput` times the same batch on 1, 2 and 3 workers (``python -m tests.faults
workers``). Each worker here is a process group on the same machine: "hosts" share its cores.
"""

from __future__ import annotations

import signal
import socket
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agentloop.orchestration.celery_adapter.batches import summarize
from agentloop.orchestration.wire import BATCH
from tests.services.worker import WorkerProcess, run_worker_process

from .rig import IMPORTS, SHORT, FaultRig
from .tally import Outcome, ScenarioResult, settle
from .workload import Size

RUNNABLE = "durable.tallied"
#: Iterations per run (each one checkpointed).
GOAL = 2
WORKERS = 3
CONCURRENCY = 2
FULL_INPUTS = 2000


@contextmanager
def _workers(rig: FaultRig, count: int) -> Iterator[list[WorkerProcess]]:
    """``count`` workers ``w1@host`` ... on the rig's broker, checkpointing every iteration."""
    rig.stop_worker()
    host = socket.gethostname()
    env = rig.worker_env(SHORT, {"AGENTLOOP_CHECKPOINT_SECONDS": "0"})
    with ExitStack() as stack:
        workers = [
            stack.enter_context(
                run_worker_process(
                    broker_url=rig.broker.worker_url,
                    result_backend=rig.redis_server.url,
                    imports=IMPORTS,
                    env=env,
                    concurrency=CONCURRENCY,
                    hostname=f"w{index}@{host}",
                    loglevel="WARNING",
                    start_timeout=120,
                )
            )
            for index in range(1, count + 1)
        ]
        yield workers


def _send_batch(rig: FaultRig, inputs: int, log: Path) -> str:
    kwargs = {
        "runnable": RUNNABLE,
        "inputs": [{"id": index, "goal": GOAL} for index in range(inputs)],
        "context": {"log": str(log)},
        "chunk_size": 100,
        "poll_seconds": 1.0,
        "key": f"{RUNNABLE}-{uuid.uuid4().hex[:8]}",  # not skipped while an earlier one is summed up
    }
    return str(rig.app.send_task(BATCH, kwargs=kwargs).get(timeout=120)["batch_id"])


def _wait(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def repeated_iterations(log: Path) -> tuple[int, int]:
    """From the tally log: how many runs ran one iteration twice (allowed: the one a killed process
    was in), and how many ran an iteration past a checkpoint again (one repeated more than once,
    or two repeated iterations in one run)."""
    counts = Counter(tuple(line.split()[:2]) for line in log.read_text().splitlines() if line.strip())
    repeated = Counter(run for (run, _), seen in counts.items() if seen > 1)
    beyond = {run for (run, _), seen in counts.items() if seen > 2} | {
        r for r, n in repeated.items() if n > 1
    }
    return len(repeated), len(beyond)


def one_of_three_killed(rig: FaultRig, size: Size) -> ScenarioResult:
    """Three workers on a batch of 2,000 (``size.runs * 10`` in a quick run); one killed at a third."""
    inputs = FULL_INPUTS if not size.quick else size.runs * 10
    result = ScenarioResult(name=f"3 workers, {inputs}-input batch, one SIGKILLed")
    with tempfile.TemporaryDirectory() as folder, _workers(rig, WORKERS) as workers:
        log = Path(folder) / "tally.log"
        log.touch()
        batch_id = _send_batch(rig, inputs, log)
        if not _wait(lambda: summarize(rig.store, batch_id)["ended"] >= inputs // 3, size.bound * 5):
            result.problems.append("a third of the batch had not ended before the strike")
        victim = workers[1]
        victim.kill(signal.SIGKILL)
        victim.wait(10)
        ended = _wait(lambda: _finished(rig, batch_id), size.bound * 10)
        runs = {f"{batch_id}-{index}": f"{RUNNABLE}#{index}" for index in range(inputs)}
        result.runs = settle(rig.store, rig.app, runs, bound=30)
        result.expect(result.runs.values(), [Outcome.COMPLETED], "the other two workers finish the batch")
        if not ended:
            result.problems.append("the batch's summary was not written")
        else:
            summary = summarize(rig.store, batch_id)
            if summary["succeeded"] != inputs:
                result.problems.append(f"the batch counts {summary['succeeded']} of {inputs} succeeded")
        twice, beyond = repeated_iterations(log)
        if beyond:
            result.problems.append(f"{beyond} runs ran an iteration again past its checkpoint")
        survivors = [w for w in workers if w is not victim]
        if not all(w.is_alive() for w in survivors):
            result.problems.append("a surviving worker died")
        result.problems.extend(_foreign_failures(rig, survivors))
        result.name += f" ({twice} in-flight iterations ran again)"
    rig.purge_queue()
    rig.start_worker(SHORT)  # the rig's own worker, for the scenarios after this one
    return result


def _finished(rig: FaultRig, batch_id: str) -> bool:
    record = rig.store.get_run(batch_id)
    return record is not None and record.is_finished


def _foreign_failures(rig: FaultRig, workers: list[WorkerProcess]) -> list[str]:
    """Error lines of the survivors' logs that say more than the lost connection of a kill."""
    lines = []
    for worker in workers:
        for line in worker.log_text().splitlines():
            if ("ERROR" in line or "CRITICAL" in line) and "Couldn't ack" not in line:
                lines.append(f"{worker.hostname}: {line[:200]}")
    return lines[:5]


@dataclass(frozen=True, slots=True)
class Throughput:
    workers: int
    inputs: int
    seconds: float

    @property
    def runs_per_second(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0


def measure_throughput(rig: FaultRig, inputs: int, counts: tuple[int, ...] = (1, 2, 3)) -> list[Throughput]:
    """The batch's wall time from its send until every run ended, on each number of workers."""
    figures = []
    for count in counts:
        with tempfile.TemporaryDirectory() as folder, _workers(rig, count):
            log = Path(folder) / "tally.log"
            log.touch()
            began = time.monotonic()
            batch_id = _send_batch(rig, inputs, log)
            if not _wait(lambda b=batch_id: summarize(rig.store, b)["open"] == 0, 3600):
                raise TimeoutError(f"the batch on {count} workers did not end within an hour")
            figures.append(Throughput(workers=count, inputs=inputs, seconds=time.monotonic() - began))
            _wait(lambda b=batch_id: _finished(rig, b), 60)  # its summary, before the workers stop
        rig.purge_queue()
    return figures


def print_throughput(figures: list[Throughput], broker: str, console: Console) -> None:
    table = Table(title=f"Batch throughput on {broker} ({CONCURRENCY} prefork processes per worker)")
    for column in ("workers", "inputs", "seconds", "runs/s", "vs 1 worker"):
        table.add_column(column, justify="right")
    base = figures[0].runs_per_second if figures else 0.0
    for figure in figures:
        ratio = figure.runs_per_second / base if base else 0.0
        table.add_row(
            str(figure.workers),
            str(figure.inputs),
            f"{figure.seconds:.1f}",
            f"{figure.runs_per_second:.1f}",
            f"{ratio:.2f}x",
        )
    console.print(table)

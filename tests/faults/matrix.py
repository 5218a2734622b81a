"""The guarantee matrix: the invariants of :mod:`.invariants` over the paths users combine (a run
of one task, one task per branch, packed, a pipeline stage, a pipeline's stages in one task, a
batch), each kind of model step
(``ModelRequest.send``, streamed, a forced tool call, an AI-driven turn), both brokers, and the
faults (worker SIGKILL, pool process killed, a duplicate delivery, a store outage, a task that
kills its process, a hard time limit, a budget), on the fault rig (:mod:`.rig`).

A cell launches a few runs of ``tests/workflows/matrix.py``, strikes mid-run, waits for every run
to end and the broker to be idle, and reports every :class:`~.invariants.Violation`. A cell
whose ``issue`` is set meets a defect of issue 33 that is being fixed (its item): it is expected
to fail until then (``test_matrix.py`` marks it ``xfail(strict=True)``; the runner reports it
as a failing cell). ``python -m tests.faults matrix [--broker rabbitmq] [--only WORD]`` runs every
cell and prints the table; ``--quick`` only the CI cells.

Which cells run in CI (``test_matrix.py``, inside ``make test``), on Redis, one worker started
once: the fault-free cell of every path (inline, one task, a task per branch, packed, a pipeline
stage, a batch) with the step kinds spread over them, the budget cells, the packed duplicate
delivery and the broker reconnect (the issue's high items), about 40 s together: each costs a
few seconds of model latency and none restarts the worker or waits out a timeout. Under ``make
faults`` only: the faults that kill the worker or its pool processes, cut the store for 5 s, or
wait out a delivery limit or a hard time limit (tens of seconds each, and the fault suite's CI
scenarios already kill workers and pool processes on the mixed workload), the other step kinds
inline, and every RabbitMQ cell (a private node starts in ~10 s, its worker's first calls are
slow).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from rich.console import Console
from rich.table import Table

from agentloop.orchestration.celery_adapter.wire_versions import app_wire_version
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.wire import BATCH, LAUNCH, WIRE_HEADER

from . import invariants as inv
from .brokers import BROKERS, BrokerKind
from .chaos_model import CELL_USAGE
from .rig import SHORT, FaultRig, WorkerProfile

#: Calls per branch (0.2 s each) and branches per composite.
CALLS, WIDTH = 3, 4
TOKENS = sum(CELL_USAGE)
#: A matrix cell's worker: the short time limits of the kill scenarios, room for packs; the
#: delivery limit is the default (RabbitMQ refuses a queue declared with another than the clients').
MATRIX_PROFILE = WorkerProfile(
    name="matrix",
    env={
        **SHORT.env,
        "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "20",
        "AGENTLOOP_TASK_TIME_LIMIT": "22",
        "AGENTLOOP_VISIBILITY_TIMEOUT": "25",
    },
)
RUNNABLES = {
    "task": "matrix.calls",
    "fan": "matrix.fan",
    "pack": "matrix.pack",
    "stage": "matrix.stage",
    "stages": "matrix.stages",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Cell:
    shape: str  # task | fan | pack | stage | stages (one task for both) | batch
    step: str  # send | stream | forced | ai
    fault: str = "none"
    ci: bool = False
    #: The issue 33 item whose defect makes the cell fail on today's main, and the invariant it breaks.
    issue: int | None = None
    breaks: str = ""
    brokers: tuple[BrokerKind, ...] = BROKERS

    @property
    def name(self) -> str:
        return f"{self.shape}/{self.step}/{self.fault}"


CELLS: tuple[Cell, ...] = (
    Cell(shape="inline", step="send", ci=True, brokers=("redis",)),
    Cell(shape="inline", step="stream", brokers=("redis",)),
    Cell(shape="inline", step="forced", ci=True, brokers=("redis",)),
    Cell(shape="inline", step="ai", brokers=("redis",)),
    Cell(shape="inline", step="forced", fault="budget", brokers=("redis",)),
    Cell(shape="task", step="send", ci=True),
    Cell(shape="task", step="forced", ci=True),
    Cell(shape="fan", step="ai", ci=True),
    Cell(shape="pack", step="forced", ci=True),
    Cell(shape="stage", step="stream", ci=True),
    Cell(shape="stages", step="send", ci=True),
    Cell(shape="batch", step="forced", ci=True),
    Cell(shape="task", step="forced", fault="budget", ci=True),
    Cell(shape="task", step="send", fault="budget", ci=True),
    Cell(
        shape="pack",
        step="forced",
        fault="duplicate",
        ci=True,
        brokers=("redis",),
    ),
    Cell(shape="fan", step="forced", fault="duplicate", brokers=("redis",)),
    Cell(shape="pack", step="forced", fault="pool-kill"),
    Cell(shape="fan", step="ai", fault="kill"),
    Cell(shape="pack", step="forced", fault="kill"),
    Cell(shape="stage", step="forced", fault="store-outage"),
    Cell(shape="stages", step="forced", fault="pool-kill"),
    Cell(shape="stages", step="forced", fault="kill"),
    Cell(shape="pack", step="forced", fault="store-outage"),
    Cell(shape="task", step="forced", fault="self-kill", brokers=("redis",)),
    Cell(shape="task", step="forced", fault="self-kill", brokers=("rabbitmq",)),
    Cell(shape="task", step="forced", fault="hard-limit"),
    # last: on RabbitMQ the purge between cells leaves the parked message in its holding queue
    Cell(shape="pack", step="forced", fault="reconnect", ci=True),
)


@dataclass(kw_only=True)
class CellResult:
    cell: Cell
    runs: int = 0
    violations: list[inv.Violation] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def held(self) -> bool:
        return not self.violations


# -- one cell -----------------------------------------------------------------------------------------


def _launch(
    rig: FaultRig, cell: Cell, budget: int | None
) -> tuple[dict[str, str], dict[tuple[str, str], int]]:
    """The cell's runs (tag -> run id) and the calls each branch must make."""
    runs: dict[str, str] = {}
    expected: dict[tuple[str, str], int] = {}
    calls = 1 if cell.step == "ai" else CALLS
    if cell.shape == "batch":
        key = uuid.uuid4().hex[:10]
        inputs = [{"tag": f"{key}{k}/0", "calls": calls, "step": cell.step} for k in range(4)]
        batch = rig.app.send_task(
            BATCH,
            kwargs={
                "runnable": "matrix.calls",
                "inputs": inputs,
                "chunk_size": 2,
                "poll_seconds": 0.2,
                "key": key,
            },
        ).get(timeout=60)
        deadline = time.monotonic() + 60
        children: list[str] = []
        while time.monotonic() < deadline and len(children) < len(inputs):
            children = [r.id for r in rig.store.list_runs(limit=100, parent_run_id=batch["batch_id"])]
            time.sleep(0.2)
        for run_id in children:
            record = rig.store.get_run(run_id)
            tag = (
                str(record.input["tag"]).split("/")[0]
                if record and isinstance(record.input, dict)
                else run_id
            )
            runs[tag] = run_id
            expected[(tag, "0")] = calls
        return runs, expected
    runnable = "matrix.turn" if cell.shape == "task" and cell.step == "ai" else RUNNABLES[cell.shape]
    for _ in range(2):
        tag = uuid.uuid4().hex[:10]
        if cell.shape == "task":
            payload: dict[str, object] = {"tag": f"{tag}/0", "calls": calls, "step": cell.step}
            branches = ["0"]
        else:
            payload = {"tag": tag, "width": WIDTH, "calls": calls, "step": cell.step}
            branches = [str(i) for i in range(2 if cell.shape in ("stage", "stages") else WIDTH)]
        runner = CeleryAgentRunner.create(runnable=runnable, context={}, app=rig.app, store=rig.store)
        runs[tag] = runner.request_sync(input=payload, token_budget=budget).run_id
        expected.update({(tag, branch): calls for branch in branches})
    return runs, expected


def _wait_calls(rig: FaultRig, since: int, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(inv.calls_seen(rig, since)) < count:
        time.sleep(0.05)


def _branch_path(shape: str, branch: str) -> str:
    """Where the store records branch ``branch`` of a cell of ``shape``: a run of one loop (each of a
    batch's runs too) at ``""``, a composite's branch at ``branch/<key>``, a pipeline's stage at
    ``pipeline/<index>`` (``tests/workflows/matrix.py``)."""
    if shape in ("task", "batch"):
        return ""
    if shape in ("fan", "pack"):
        return f"branch/{branch}"
    if shape in ("stage", "stages"):
        return f"pipeline/{branch}"
    raise ValueError(f"no branch path for a {shape!r} cell")


def _branch_records(
    rig: FaultRig,
    shape: str,
    runs: dict[str, str],
    expected: dict[tuple[str, str], int],
    *,
    ended: bool = False,
) -> dict[tuple[str, str], tuple[bool, int]]:
    """Per branch: whether the store holds it finished, and its checkpoint's iteration, read at the
    path the cell's ``shape`` records it (:func:`_branch_path`).

    ``ended``: the runs have ended; a succeeded run's branch that is not found finished there is a
    :class:`LookupError` (raised, not a violation: the lookup is wrong, and the repeated-call check
    it feeds would check nothing)."""
    found = {}
    for (tag, branch), _ in expected.items():
        run_id, path = runs[tag], _branch_path(shape, branch)
        finished, _, checkpoint = rig.store.loop_record(run_id, path)
        found[(tag, branch)] = (finished, checkpoint[0] if checkpoint else 0)
        if ended and not finished:
            record = rig.store.get_run(run_id)
            if record is not None and record.status == "succeeded":
                raise LookupError(
                    f"run {tag} ({run_id}) succeeded, but the store holds no finished loop at "
                    f"{path!r} for its branch {branch}: the {shape} cell looks in the wrong place"
                )
    return found


def _settle(rig: FaultRig, run_ids: Sequence[str], bound: float) -> None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        records = [rig.store.get_run(run_id) for run_id in run_ids]
        if all(r is not None and r.is_finished for r in records):
            break
        time.sleep(0.25)
    rig.wait_idle(30)


def _copies_in_flight(rig: FaultRig) -> list[bytes]:
    """The messages delivered and not yet acknowledged (Redis: kombu's ``unacked`` hash), as
    they were sent: no redelivered flag."""
    copies = []
    for raw in rig.redis.hvals("unacked"):
        message, _exchange, routing_key = json.loads(raw)
        copies.append(json.dumps(message).encode())
        assert routing_key is not None
    return copies


def _strike(rig: FaultRig, cell: Cell) -> Callable[[], None]:
    """Strike now; what to do once the runs have ended (send the held copies)."""
    if cell.fault == "kill":
        assert rig.worker is not None
        rig.worker.kill(signal.SIGKILL)
        rig.worker.wait(10)
        rig.start_worker(MATRIX_PROFILE)
    elif cell.fault == "pool-kill":
        for child in rig.pool_children():
            os.kill(child, signal.SIGKILL)
    elif cell.fault == "reconnect":
        if rig.broker.kind == "redis":
            rig.redis.client_kill_filter(_type="normal")
        else:
            rig.broker.drop_connections(1.0)
    elif cell.fault == "store-outage":
        with rig.proxy.refusing():
            time.sleep(5)
    elif cell.fault == "duplicate":
        copies = _copies_in_flight(rig)
        if not copies:
            raise RuntimeError("no message was in flight to copy")

        def resend() -> None:
            for copy in copies:
                rig.redis.lpush(rig.broker.queue, copy)

        return resend
    return _nothing


def _nothing() -> None:
    """What follows a strike that leaves nothing to do."""


def run_inline(rig: FaultRig, cell: Cell) -> CellResult:
    """The cell on the in-process runner (:class:`~workflows.matrix.CellFan`, its branches
    on one event loop): no store, no broker; its usage is the runner's meter, its ends the events."""
    from workflows.limits import TOOL_ID, StaticToolStore
    from workflows.matrix import CellFan

    from agentloop.actions import InMemoryUsageMeter, TokenBudgetExceededError
    from agentloop.loops import InlineAgentRunner
    from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
    from agentloop.orchestration.runtime.run_end import failure_status

    from .chaos_model import API_KEY

    rig.use_profile(MATRIX_PROFILE)  # idle, but the runner's recover() after each cell wants one
    result, since = CellResult(cell=cell, runs=1), len(rig.model.requests)
    budget = 2 * TOKENS if cell.fault == "budget" else None
    tag = uuid.uuid4().hex[:10]
    context = SimpleNamespace(
        processor=OpenAIProcessor(api_key=API_KEY, base_url=rig.model.base_url, max_retries=0),
        stream_processor=OpenAIProcessor(api_key=API_KEY, base_url=rig.model.base_url, stream=True),
        tool_store=StaticToolStore(),
        tool_id=TOOL_ID,
    )
    ends: Counter[str] = Counter()

    def on_progress(event: Any) -> None:
        if str(event.status) in inv.TERMINAL_EVENTS:
            ends[event.path] += 1

    meter, calls = InMemoryUsageMeter(budget=budget), 1 if cell.step == "ai" else CALLS
    payload = {"tag": tag, "width": WIDTH, "calls": calls, "step": cell.step}
    runner = InlineAgentRunner.create(runnable=CellFan, context=context)
    try:
        runner.request_sync(input=payload, on_progress=on_progress, meter=meter)
        status = "succeeded"
    except Exception as error:  # a branch's error, wrapped: the status the engine would record
        status = failure_status(error)
        if isinstance(error.__cause__, TokenBudgetExceededError) or "TokenBudgetExceededError" in str(error):
            status = "budget_exceeded"
    seen = inv.RunSeen(
        tag=tag,
        run_id=tag,
        status=status,
        input_tokens=meter.usage.input_tokens,
        output_tokens=meter.usage.output_tokens,
        token_budget=budget,
        ends=ends,
    )
    expected = {} if budget else {(tag, str(i)): calls for i in range(WIDTH)}
    found = inv.calls_seen(rig, since, TOKENS)
    result.violations = inv.all_checks([seen], found, expected, [], inv.Census(queues={}), in_flight=WIDTH)
    return result


def run_cell(rig: FaultRig, cell: Cell, *, bound: float = 120.0) -> CellResult:
    """Launch the cell's runs, strike, check every invariant."""
    started = time.monotonic()
    if cell.shape == "inline":
        result = run_inline(rig, cell)
        result.seconds = time.monotonic() - started
        return result
    result = CellResult(cell=cell)
    rig.use_profile(MATRIX_PROFILE)
    rig.purge_queue()  # what an earlier cell left is that cell's finding, not this one's
    inv.install_audit(rig)
    audit, since = inv.audit_mark(rig), len(rig.model.requests)
    if cell.fault in ("self-kill", "hard-limit"):
        runnable = (
            "durable.kills_its_process" if cell.fault == "self-kill" else "durable.swallows_its_time_limit"
        )
        run_id = rig.launch(runnable, 1)
        _settle(rig, [run_id], bound)
        seen = [inv.run_seen(rig, run_id, run_id[:8])]
        result.runs = 1
        result.violations = inv.all_checks(
            seen,
            [],
            {},
            inv.rewrites(rig, audit),
            inv.idle_census(rig),
            check_calls=False,
        )
        if seen[0].status == "succeeded":
            result.violations.append(
                inv.Violation(invariant="one end", run=seen[0].tag, where="", what="succeeded")
            )
        result.seconds = time.monotonic() - started
        return result
    budget = 2 * TOKENS if cell.fault == "budget" else None
    log_at, holding = len(rig.worker_log()), {}
    if cell.fault == "reconnect":  # a message parked for a newer worker, then the worker's
        holding = {_park_one(rig): 1}  # connections cut while it waits on them (idle: busy, it
        _strike(rig, cell)  # reconnects within a command and its consumer never restarts)
    runs, expected = _launch(rig, cell, budget)
    result.runs = len(runs)
    before, strike_at = None, 0
    after: Callable[[], None] = _nothing
    if cell.fault not in ("none", "budget", "reconnect"):
        _wait_calls(rig, since, 4)
        strike_at = len(rig.model.requests)
        before = _branch_records(rig, cell.shape, runs, expected)
        after = _strike(rig, cell)
    if cell.fault == "duplicate":  # the copies arrive once their twins' branches have finished
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            f for f, _ in _branch_records(rig, cell.shape, runs, expected).values()
        ):
            time.sleep(0.05)
        before, strike_at = _branch_records(rig, cell.shape, runs, expected), len(rig.model.requests)
        after()
    _settle(rig, list(runs.values()), bound)
    if not budget:  # every succeeded run's branches are found where the lookup reads them
        _branch_records(rig, cell.shape, runs, expected, ended=True)
    calls = inv.calls_seen(rig, since, TOKENS)
    seen = [inv.run_seen(rig, run_id, tag) for tag, run_id in runs.items()]
    result.violations = inv.all_checks(
        seen,
        calls,
        {} if budget else expected,
        inv.rewrites(rig, audit),
        inv.idle_census(rig, holding),
        before=before,
        since=max(0, strike_at - since),
        exact_usage=cell.fault in ("none", "budget", "duplicate"),
        in_flight=2,
    )
    if cell.fault == "reconnect":
        result.violations += inv.parked_once(rig.worker_log()[log_at:].count("Parked "), 1)
        rig.stop_worker()  # it may be spinning on its holding queue: the next cell gets a new one
        rig.purge_queue()
    result.seconds = time.monotonic() - started
    return result


def _park_one(rig: FaultRig) -> str:
    """Send a launch of the next wire version; once the worker parked it, its holding queue."""
    version = app_wire_version(rig.app) + 1
    queue = f"{rig.broker.queue}.wire.{version}"
    kwargs = {"runnable": "parity.count", "input": 1, "context": {}}
    rig.foreign.send_task(LAUNCH, kwargs=kwargs, headers={WIRE_HEADER: version})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and inv.census(rig).queues.get(queue, 0) < 1:
        time.sleep(0.2)
    return queue


# -- the runner ---------------------------------------------------------------------------------------


def select(broker: BrokerKind, *, quick: bool = False, only: Sequence[str] = ()) -> list[Cell]:
    chosen = [c for c in CELLS if broker in c.brokers and (c.ci or not quick)]
    return [c for c in chosen if not only or any(word in c.name for word in only)]


def run_matrix(
    broker: BrokerKind = "redis",
    *,
    quick: bool = False,
    only: Sequence[str] = (),
    console: Console | None = None,
) -> list[CellResult]:
    """Every selected cell on one rig; prints the table. A cell of a known defect that fails is
    reported as failing (with its item), one that holds as fixed."""
    console = console or Console()
    results = []
    with FaultRig.open(broker) as rig:
        for cell in select(broker, quick=quick, only=only):
            console.print(f"[bold]{cell.name}[/bold] ...")
            try:
                result = run_cell(rig, cell)
            except Exception as error:  # the cell itself broke: say so, go on
                what = f"the cell raised {error!r}"[:300]
                result = CellResult(
                    cell=cell, violations=[inv.Violation(invariant="cell", run="-", where="", what=what)]
                )
            rig.recover()
            results.append(result)
    table = Table(title=f"Guarantee matrix on {rig.broker.label}")
    for column in ("cell", "runs", "verdict", "known defect", "first violation"):
        table.add_column(column)
    for r in results:
        verdict = "held" if r.held else "FAILED"
        known = f"issue 33 item {r.cell.issue}" if r.cell.issue else ""
        table.add_row(
            r.cell.name, str(r.runs), verdict, known, str(r.violations[0])[:120] if r.violations else ""
        )
    console.print(table)
    for r in results:
        if r.violations:
            console.print(
                f"[bold red]{r.cell.name}[/bold red]\n{inv.summary(r.violations, 10)}", highlight=False
            )
    return results

"""The scenarios in the order they run, and running them on one rig.

Scenarios on the worker with long time limits come first (messages, model, database outages),
those on the one with short limits after (kills, Redis: the messages of a killed worker come back
after the visibility timeout, which must exceed the hard time limit), so the worker is restarted
with new settings once. After
each scenario a worker that died, or lives on with a broken consumer, is noted as a problem of
that scenario and replaced, on an emptied queue, so one crash does not take the scenarios after
it down too.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from .brokers import BROKERS, BrokerKind
from .infra_scenarios import (
    answered_then_killed,
    broker_restarted,
    connection_dropped,
    hard_time_limit,
    pool_child_killed,
    postgres_outage,
    worker_sigkill,
)
from .message_scenarios import duplicate_ids, model_outages, poison
from .pack_scenarios import packed_pool_child_killed, packed_redis_restarted, packed_worker_sigkill
from .poison import POISONS
from .rig import FaultRig
from .tally import ScenarioResult, print_table
from .worker_hosts import one_of_three_killed
from .workload import ScenarioFn, Size


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    name: str
    run: ScenarioFn
    #: Part of the fast run CI makes inside the test suite.
    quick: bool = True
    #: The brokers it runs on.
    brokers: tuple[BrokerKind, ...] = BROKERS


SCENARIOS: tuple[Scenario, ...] = (
    *(Scenario(name=f"poison: {kind}", run=poison(kind)) for kind in POISONS),
    Scenario(name="duplicate run ids", run=duplicate_ids),
    Scenario(name="model outages", run=model_outages),
    Scenario(name="PostgreSQL refusing 5 s", run=postgres_outage(5)),
    Scenario(name="PostgreSQL refusing 60 s", run=postgres_outage(60), quick=False),
    Scenario(name="pool child killed", run=pool_child_killed),
    Scenario(name="hard time limit kill", run=hard_time_limit),
    Scenario(name="worker SIGKILLed", run=worker_sigkill),
    Scenario(name="broker restarted", run=broker_restarted),
    Scenario(name="consumer connection dropped", run=connection_dropped, brokers=("rabbitmq",)),
    Scenario(name="worker SIGKILLed between an answer's writes", run=answered_then_killed),
    Scenario(name="3 workers, one SIGKILLed mid-batch", run=one_of_three_killed, quick=False),
    Scenario(
        name="packed: pool processes killed mid-pack",
        run=packed_pool_child_killed,
        quick=False,
        brokers=("redis",),
    ),
    Scenario(
        name="packed: worker SIGKILLed mid-pack", run=packed_worker_sigkill, quick=False, brokers=("redis",)
    ),
    Scenario(
        name="packed: Redis restarted under packs",
        run=packed_redis_restarted,
        quick=False,
        brokers=("redis",),
    ),
)


def select(size: Size, only: Sequence[str] = (), broker: BrokerKind = "redis") -> list[Scenario]:
    """The scenarios of ``size`` (all of them for the full run) on ``broker``, those whose name
    contains one of ``only`` when given."""
    chosen = [s for s in SCENARIOS if (s.quick or not size.quick) and broker in s.brokers]
    if only:
        chosen = [s for s in chosen if any(word.lower() in s.name.lower() for word in only)]
    return chosen


#: Where a failed scenario's worker log is kept (``tests/artifacts/``, not committed): its error
#: lines name the error, its tracebacks say where it was raised.
LOGS = Path(__file__).resolve().parents[1] / "artifacts" / "faults"


def keep_log(rig: FaultRig, scenario: Scenario) -> Path:
    """Write what the worker logged during ``scenario`` to a file under :data:`LOGS`; its path."""
    LOGS.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", scenario.name.lower()).strip("-")
    path = LOGS / f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    path.write_text(rig.worker_log()[rig.log_mark :], encoding="utf-8")
    return path


def run_scenario(rig: FaultRig, scenario: Scenario, size: Size) -> ScenarioResult:
    """Run one scenario; an error of the scenario itself is a problem of its result."""
    started = time.monotonic()
    rig.mark_log()
    try:
        result = scenario.run(rig, size)
    except Exception as error:  # the scenario broke: say so, and go on with the next
        result = ScenarioResult(name=scenario.name, problems=[f"the scenario raised {error!r}"])
    if not result.passed:
        result.problems.extend(f"worker log: {line}" for line in rig.worker_errors(rig.log_mark))
        result.problems.append(f"the worker's whole log of the scenario: {keep_log(rig, scenario)}")
    note = rig.recover()
    if note is not None:
        result.problems.append(note)
    result.seconds = time.monotonic() - started
    return result


def run_suite(
    size: Size, only: Sequence[str] = (), console: Console | None = None, broker: BrokerKind = "redis"
) -> list[ScenarioResult]:
    """Every selected scenario on one rig; the table of their figures is printed at the end."""
    console = console or Console()
    results = []
    with FaultRig.open(broker) as rig:
        for scenario in select(size, only, broker):
            console.print(f"[bold]{scenario.name}[/bold] ...")
            result = run_scenario(rig, scenario, size)
            console.print(f"  {result.summary_line()}", markup=False, highlight=False)
            results.append(result)
    title = f"Fault suite on {rig.broker.label}" + (" (quick)" if size.quick else "")
    print_table(results, title=title, console=console)
    return results

"""The runs a scenario puts in flight: real workflows of the parity suite, the durable tests' slow
loop (so something is mid-run when the fault strikes), the record-search agent and demo, and a
composite of packed branches calling the model."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentloop.examples.record_search.workflows import DEMO_QUESTIONS

from .rig import FaultRig
from .tally import ScenarioResult


@dataclass(frozen=True, kw_only=True, slots=True)
class Size:
    """How big a scenario is: the fast part CI runs, or the full ``make faults``."""

    quick: bool
    #: Runs of the mixed workload per infrastructure scenario (more are launched during an outage).
    runs: int
    #: Seconds a run may take to end once the fault is over, before it counts as lost or stuck.
    bound: float
    #: Record-search runs per kind of model fault.
    per_fault: int


#: A scenario: it attacks the rig and says what became of its runs.
ScenarioFn = Callable[[FaultRig, Size], ScenarioResult]

QUICK = Size(quick=True, runs=4, bound=60.0, per_fault=1)
FULL = Size(quick=False, runs=16, bound=180.0, per_fault=4)


@dataclass(frozen=True, kw_only=True, slots=True)
class Workflow:
    name: str
    input: Callable[[int], Any]
    context: dict[str, Any] | None = None


def _question(index: int) -> dict[str, str]:
    return {"message": DEMO_QUESTIONS[index % (len(DEMO_QUESTIONS) - 1)]}


def _questions(index: int) -> dict[str, list[str]]:
    return {"questions": [DEMO_QUESTIONS[index % 4], DEMO_QUESTIONS[(index + 1) % 4]]}


#: The mix, in launch order: the first is slow, so a fault finds it mid-run.
MIX: tuple[Workflow, ...] = (
    Workflow(name="durable.slow_count", input=lambda i: 8, context={"step_seconds": 0.3}),
    Workflow(name="record_search.ask", input=_question, context={}),
    Workflow(name="parity.fan_of_pipelines", input=lambda i: 2 + i % 3),
    Workflow(name="record_search.demo", input=_questions, context={}),
    Workflow(name="parity.three_stages", input=lambda i: i),
    Workflow(name="parity.slow_fan_short", input=lambda i: 2),
    Workflow(name="parity.fan_after_stage", input=lambda i: 3),
    Workflow(name="parity.collecting_fan", input=lambda i: None),
    # a composite of 8 model-calling loops packed to one task (tests/faults/pack_scenarios.py)
    Workflow(
        name="parity.packed_model_calls",
        input=lambda i: {"tag": f"mix{i}-{uuid.uuid4().hex[:8]}", "width": 8, "calls": 3},
    ),
)


def launch_mix(rig: FaultRig, count: int, *, start: int = 0) -> dict[str, str]:
    """Launch ``count`` runs of :data:`MIX` in turn; run id -> a label naming the workflow."""
    runs = {}
    for index in range(start, start + count):
        workflow = MIX[index % len(MIX)]
        run_id = rig.launch(workflow.name, workflow.input(index), context=workflow.context)
        runs[run_id] = f"{workflow.name}#{index}"
    return runs

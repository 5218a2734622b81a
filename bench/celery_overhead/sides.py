"""The four sides: the framework's composite and pipeline, and the bare chord and chain beside them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import BenchOptions
from bench.celery_overhead.rig import Rig

DEFAULT_WIDTH = 1000
DEFAULT_STAGES = 50
DEFAULT_ROUNDS = 5
QUICK_WIDTH = 100
QUICK_STAGES = 10
QUICK_ROUNDS = 2


@dataclass(frozen=True, kw_only=True)
class Side:
    key: str
    label: str
    workload: str  # "composite" or "pipeline"
    framework: bool
    tasks: int  # Celery tasks the side executes
    expected: Any
    send: Callable[[Rig], Any]  # returns an AsyncResult


def build_sides(width: int, stages: int) -> list[Side]:
    from celery import chain, chord

    from agentloop.orchestration.wire import LAUNCH
    from bench.workflows_celery import FAN, NOOP, NOOP_BODY, pipeline_name

    def launch(runnable: str, input: Any) -> Callable[[Rig], Any]:
        def send(r: Rig) -> Any:
            return r.app.send_task(LAUNCH, kwargs={"runnable": runnable, "input": input})

        return send

    def bare_chord(r: Rig) -> Any:
        header = [r.app.signature(NOOP) for _ in range(width)]
        return chord(header, r.app.signature(NOOP_BODY)).apply_async()

    def bare_chain(r: Rig) -> Any:
        return chain(*(r.app.signature(NOOP) for _ in range(stages))).apply_async()

    return [
        Side(
            key="fw_composite",
            label=f"framework composite of {width} loops",
            workload="composite",
            framework=True,
            tasks=width + 3,  # launch + branches + merge + finalize
            expected=width,
            send=launch(FAN, width),
        ),
        Side(
            key="bare_chord",
            label=f"bare chord of {width} no-ops + body",
            workload="composite",
            framework=False,
            tasks=width + 1,
            expected=width,
            send=bare_chord,
        ),
        Side(
            key="fw_pipeline",
            label=f"framework pipeline of {stages} loops",
            workload="pipeline",
            framework=True,
            tasks=1,  # the launch runs every stage (each recorded), closes the pipeline, ends the run
            expected=1,
            send=launch(pipeline_name(stages), None),
        ),
        Side(
            key="bare_chain",
            label=f"bare chain of {stages} no-ops",
            workload="pipeline",
            framework=False,
            tasks=stages,
            expected=1,
            send=bare_chain,
        ),
    ]


def sizes(options: BenchOptions) -> tuple[int, int, int]:
    """The composite's width, the pipeline's stages and the rounds ``options`` ask for."""
    if options.size is not None:
        width, stages = options.size, max(1, options.size // 20)
    elif options.quick:
        width, stages = QUICK_WIDTH, QUICK_STAGES
    else:
        width, stages = DEFAULT_WIDTH, DEFAULT_STAGES
    rounds = options.rounds or (QUICK_ROUNDS if options.quick else DEFAULT_ROUNDS)
    return width, stages, rounds

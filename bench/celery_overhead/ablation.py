"""``--ablate``: the benchmark again with parts of the framework switched off in the worker (experiments)."""

from __future__ import annotations

from bench import BenchOptions
from bench.celery_overhead.measure import measure
from bench.celery_overhead.report import table
from bench.celery_overhead.sides import sizes

_ABLATION_LABELS = {
    "celery_progress": "no PROGRESS state/event",
    "store_progress": "no progress rows",
    "checkpoints": "no checkpoint rows",
    "cancel": "no cancel reads",
}


def ablation_study(options: BenchOptions, variants: list[str], *, store_kind: str) -> str:
    """Each variant (comma-separated ablations) on its own worker, bare sides re-measured alongside."""
    from bench.workflows_celery import ABLATE_ENV

    width, stages, rounds = sizes(options)
    rows: list[tuple[str, ...]] = [
        (
            "framework variant (worker-side experiment)",
            "composite x wall",
            "x CPU",
            "pipeline x wall",
            "x CPU",
            "fw CPU ms/branch",
            "bare CPU ms/task",
            "fw CPU ms/stage",
            "bare CPU ms/hop",
        )
    ]
    for variant in ["", *variants]:
        report = measure(
            width=width,
            stages=stages,
            rounds=rounds,
            store_kind=store_kind,
            worker_env={ABLATE_ENV: variant} if variant else None,
        )
        res = report.results
        rows.append(
            (
                " + ".join(_ABLATION_LABELS.get(name, name) for name in variant.split(","))
                if variant
                else "as is",
                f"{report.ratio('composite'):.2f}",
                f"{report.cpu_ratio('composite'):.2f}",
                f"{report.ratio('pipeline'):.2f}",
                f"{report.cpu_ratio('pipeline'):.2f}",
                f"{res['fw_composite'].cpu_median / width * 1000:.2f}",
                f"{res['bare_chord'].cpu_median / (width + 1) * 1000:.2f}",
                f"{res['fw_pipeline'].cpu_median / stages * 1000:.2f}",
                f"{res['bare_chain'].cpu_median / stages * 1000:.2f}",
            )
        )
        print(f"  ... {rows[-1][0]}: composite {rows[-1][1]}x, pipeline {rows[-1][3]}x", flush=True)
    lines = [
        f"Ablation experiments: composite of {width}, pipeline of {stages}, {rounds} rounds each, "
        f"run store {store_kind}; each row is its own worker and its own bare measurement",
        "",
        *table(rows),
    ]
    return "\n".join(lines)

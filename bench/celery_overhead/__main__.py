"""``python -m bench.celery_overhead``: the ``celery`` benchmark alone, with ``--store`` and ``--ablate``."""

from __future__ import annotations

import os
import sys

from bench import BenchOptions
from bench.celery_overhead import SUMMARY, cli
from bench.celery_overhead.ablation import ablation_study
from bench.celery_overhead.rig import ROOT, STORE_ENV


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.celery_overhead [--quick] [--rounds N] [--size N] [--profile] [--store KIND]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.celery_overhead", description=SUMMARY)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--size", type=int)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--store", choices=("sqlite", "postgres"))
    parser.add_argument(
        "--ablate",
        action="append",
        metavar="A[,B...]",
        help="instead of the benchmark: measure the framework with these parts switched off in the worker "
        "(an experiment; repeat for several variants); names: celery_progress, store_progress, "
        "checkpoints, cancel",
    )
    args = parser.parse_args(argv)
    if args.store:
        os.environ[STORE_ENV] = args.store
    options = BenchOptions(quick=args.quick, rounds=args.rounds, size=args.size, profile=args.profile)
    if args.ablate:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        kind = os.environ.get(STORE_ENV, "").strip().lower() or "sqlite"
        print(ablation_study(options, args.ablate, store_kind=kind))
        return 0
    passed = cli(options)
    return 0 if passed is not False else 1


if __name__ == "__main__":
    sys.exit(main())

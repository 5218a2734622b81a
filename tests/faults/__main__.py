"""``python -m tests.faults [--quick] [--only WORD ...] [--broker redis|rabbitmq]`` runs the fault
suite; ``python -m tests.faults soak [--minutes M]`` the bounded soak; ``python -m tests.faults
workers [--inputs N]`` a batch's throughput on 1, 2 and 3 workers; ``python -m tests.faults matrix
[--quick] [--only WORD ...]`` the guarantee matrix (:mod:`.matrix`). Exit status 1 when anything failed."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("mode", nargs="?", choices=["suite", "soak", "workers", "matrix"], default="suite")
    parser.add_argument(
        "--broker", choices=["redis", "rabbitmq"], default="redis", help="the broker attacked"
    )
    parser.add_argument("--inputs", type=int, default=2000, help="the batch's size (workers)")
    parser.add_argument("--quick", action="store_true", help="the small version CI runs")
    parser.add_argument("--only", nargs="*", default=(), help="scenarios whose name contains a word")
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the soak")
    args = parser.parse_args(argv)
    console = Console()
    if args.mode == "soak":
        from .soak import run_soak

        return 0 if run_soak(minutes=args.minutes, console=console, broker=args.broker).passed else 1
    if args.mode == "matrix":
        from .matrix import run_matrix

        cells = run_matrix(args.broker, quick=args.quick, only=args.only, console=console)
        return 0 if cells and all(cell.held for cell in cells) else 1
    if args.mode == "workers":
        from .rig import FaultRig
        from .worker_hosts import measure_throughput, print_throughput

        with FaultRig.open(args.broker) as rig:
            figures = measure_throughput(rig, args.inputs)
            print_throughput(figures, rig.broker.label, console)
        return 0
    from .suite import run_suite
    from .workload import FULL, QUICK

    results = run_suite(QUICK if args.quick else FULL, args.only, console=console, broker=args.broker)
    return 0 if results and all(result.passed for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())

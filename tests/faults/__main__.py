"""``python -m tests.faults [--quick] [--only WORD ...]`` runs the fault suite;
``python -m tests.faults soak [--minutes M]`` the bounded soak. Exit status 1 when anything failed."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("mode", nargs="?", choices=["suite", "soak"], default="suite")
    parser.add_argument("--quick", action="store_true", help="the small version CI runs")
    parser.add_argument("--only", nargs="*", default=(), help="scenarios whose name contains a word")
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the soak")
    args = parser.parse_args(argv)
    console = Console()
    if args.mode == "soak":
        from .soak import run_soak

        return 0 if run_soak(minutes=args.minutes, console=console).passed else 1
    from .suite import run_suite
    from .workload import FULL, QUICK

    results = run_suite(QUICK if args.quick else FULL, args.only, console=console)
    return 0 if results and all(result.passed for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())

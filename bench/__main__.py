"""``python -m bench [NAME ...] [--quick] [--rounds N] [--size N] [--profile] [--check]``.

Runs the named benchmarks (all of them when none is named) and prints their
figures. To add a benchmark, write a module with ``NAME``, ``SUMMARY`` and
``cli(options: BenchOptions) -> bool | None`` (whether its target was met,
``None`` when not checked) and list it in :data:`BENCHMARKS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench import BenchOptions, celery_overhead, engine_overhead, store_volume


@dataclass(frozen=True, kw_only=True, slots=True)
class Benchmark:
    name: str
    summary: str
    cli: Callable[[BenchOptions], bool | None]


BENCHMARKS: dict[str, Benchmark] = {
    module.NAME: Benchmark(name=module.NAME, summary=module.SUMMARY, cli=module.cli)
    for module in (engine_overhead, celery_overhead, store_volume)
}


def _parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"  {name:<10} {bench.summary}" for name, bench in BENCHMARKS.items())
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run the project's benchmarks.",
        epilog=f"benchmarks:\n{listing}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (indicative figures only)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (the median is reported)")
    parser.add_argument("--size", type=int, help="problem size, e.g. iterations per run")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of the framework side")
    parser.add_argument("--check", action="store_true", help="exit 1 when a benchmark misses its target")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        for name, bench in BENCHMARKS.items():
            print(f"{name}: {bench.summary}")
        return 0
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    for value, flag in ((args.rounds, "--rounds"), (args.size, "--size")):
        if value is not None and value < 1:
            parser.error(f"{flag} must be at least 1")
    options = BenchOptions(quick=args.quick, rounds=args.rounds, size=args.size, profile=args.profile)
    missed: list[str] = []
    names = args.names or list(BENCHMARKS)
    for index, name in enumerate(dict.fromkeys(names)):
        if index:
            print()
        if BENCHMARKS[name].cli(options) is False:
            missed.append(name)
    if missed:
        print(f"\ntarget missed: {', '.join(missed)}")
    return 1 if missed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())

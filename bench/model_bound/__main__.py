"""``python -m bench.model_bound [--runs 200,1000] [--rounds 3] [--openai] [--store sqlite|postgres]``."""

from __future__ import annotations

import argparse
import sys

from bench.celery_overhead.rig import NotRunnable
from bench.model_bound.run import IDEAL, Figures, measure, rig

TARGET_BARE = 1.2
TARGET_IDEAL = 1.5


def _report(figures: list[Figures], title: str) -> bool:
    print(title)
    print(f"{'runs':>6} {'framework s':>12} {'bare chord s':>13} {'fw/bare':>8} {'fw/ideal':>9}", end="")
    print(f" {'bare/ideal':>11} {'worker CPU ms/run fw, bare':>27}")
    ok = True
    for f in figures:
        to_bare, to_ideal = f.fw / f.chord, f.fw / IDEAL
        print(f"{f.runs:>6} {f.fw:>12.2f} {f.chord:>13.2f} {to_bare:>7.2f}x {to_ideal:>8.2f}x", end="")
        fw_cpu, bare_cpu = f.cpu_ms_per_run()
        cpu_ratio = fw_cpu / max(bare_cpu, 1e-9)
        print(f" {f.chord / IDEAL:>10.2f}x {fw_cpu:>12.1f}, {bare_cpu:.1f} ({cpu_ratio:.2f}x)")
        ok = ok and to_bare <= TARGET_BARE and (f.runs > 200 or to_ideal <= TARGET_IDEAL)
    print(f"targets: framework/bare <= {TARGET_BARE}x; 200 runs framework/ideal <= {TARGET_IDEAL}x:",
          "PASS" if ok else "FAIL")  # fmt: skip
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_bound", description=__doc__)
    parser.add_argument("--runs", default="200,1000", help="comma-separated composite widths")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=200, help="threads of the worker(s), in all")
    parser.add_argument("--workers", type=int, default=1, help="worker processes sharing those threads")
    parser.add_argument("--store", default="postgres", choices=("sqlite", "postgres"))
    parser.add_argument("--openai", action="store_true", help="via OpenAIProcessor, local server")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the worker")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    sizes = [int(part) for part in args.runs.split(",") if part.strip()]
    env = dict(item.split("=", 1) for item in args.env)
    try:
        options = {
            "concurrency": args.concurrency,
            "openai": args.openai,
            "env": env,
            "workers": args.workers,
        }
        with rig(store=args.store, **options) as r:
            started_rss = r.worker_rss_mib()
            figures = measure(r, sizes, args.rounds)
            rss = f"worker RSS {started_rss:.0f} MiB idle, {r.worker_rss_mib():.0f} MiB after the runs"
    except NotRunnable as missing:
        print(f"model_bound: NOT RUN ({missing})")
        return 0
    wait = "OpenAIProcessor -> local server" if args.openai else "asyncio.sleep"
    title = (
        f"model-bound runs ({wait}, 3 calls x 200 ms, ideal {IDEAL:.1f} s), {args.workers} worker(s) "
        f"--pool threads, {args.concurrency} threads in all, {args.store} store, median of {args.rounds}"
    )
    ok = _report(figures, title)
    print(rss)
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())

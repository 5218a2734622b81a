"""``python -m bench.fairness``: does one interactive run start within 1 s while a batch runs?

On a private Redis (``--broker rabbitmq``: a private vhost of the local RabbitMQ as the broker,
results still in the private Redis; there the batch's messages go to their own quorum queue), a
private PostgreSQL database (``--store sqlite`` for a file) and one ``--pool threads`` worker:
``agentloop.batch`` of ``--inputs`` (2,000) ``bench.trivial`` loops is sent, and once its first
runs have ended a single ``agentloop.launch`` of ``bench.trivial`` follows. Printed: the seconds
from sending that launch to its run being recorded running in the run store,
and to its result, against the 1 s target. Only 127.0.0.1 is used; every wait
is bounded (``--timeout``).
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from typing import Any

from bench.batch_scale import RUNNABLE
from bench.celery_overhead.rig import ROOT, NotRunnable, _detach_result_consumer, run_store_url

TARGET_SECONDS = 1.0


def _until(check: Any, timeout: float, what: str) -> float:
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"{what} did not happen within {timeout} s")
        time.sleep(0.01)
    return time.monotonic() - began


def run(args: argparse.Namespace) -> bool:
    """One batch and one interactive run beside it; prints the figures, returns the verdict."""
    from agentloop import create_app, load_settings
    from agentloop.orchestration.celery_adapter.batches import summarize
    from agentloop.orchestration.store import open_store
    from agentloop.orchestration.wire import BATCH, LAUNCH
    from tests.servers.rabbitmq import private_rabbitmq
    from tests.servers.redis_server import ServiceUnavailable, private_redis_server
    from tests.servers.worker import run_worker_process

    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
            broker = server.url
            if args.broker == "rabbitmq":
                target = stack.enter_context(private_rabbitmq())
                if not target.private:
                    raise NotRunnable("no private RabbitMQ vhost (rabbitmqctl) for the batch queue")
                broker = target.url
        except ServiceUnavailable as unavailable:
            raise NotRunnable(unavailable.reason) from unavailable
        database_url = stack.enter_context(run_store_url(args.store))
        env = {"DATABASE_URL": database_url, "AGENTLOOP_BENCH_WORKER": "1", "PYTHONPATH": str(ROOT)}
        stack.enter_context(
            run_worker_process(
                broker_url=broker,
                result_backend=server.url,
                imports=["bench.workflows_celery"],
                env=env,
                pool="threads",
                concurrency=args.concurrency,
                loglevel="WARNING",
                start_timeout=60.0,
            )
        )
        client_env = {"BROKER_URL": broker, "RESULT_BACKEND": server.url, "DATABASE_URL": database_url}
        app = create_app(settings=load_settings(client_env))
        stack.callback(app.close)
        stack.callback(_detach_result_consumer, app)
        store, _ = open_store(database_url, migrate=False)
        stack.callback(store.engine.dispose)

        kwargs = {"runnable": RUNNABLE, "inputs": [None] * args.inputs, "poll_seconds": 1.0}
        batch_id = app.send_task(BATCH, kwargs=kwargs).get(timeout=args.timeout)["batch_id"]
        _until(lambda: summarize(store, batch_id)["ended"] >= 50, args.timeout, "the batch's first runs")
        began = time.monotonic()
        launched = app.send_task(LAUNCH, kwargs={"runnable": RUNNABLE, "input": None})

        def running() -> bool:
            record = store.get_run(str(launched.id))
            return record is not None and record.status != "pending"

        started = _until(running, args.timeout, "the interactive run's start")
        launched.get(timeout=args.timeout)
        finished = time.monotonic() - began
        open_runs = summarize(store, batch_id)["open"]

    ok = started <= TARGET_SECONDS
    print(
        f"fairness on {args.broker}: one interactive run beside a batch of {args.inputs},"
        f" --pool threads -c {args.concurrency}"
    )
    print(f"  started after {started:.2f} s (target {TARGET_SECONDS} s), result after {finished:.2f} s;")
    print(f"  batch runs still open when it ended: {open_runs}")
    print("verdict:", "PASS" if ok else "FAIL")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--inputs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--store", default="postgres", choices=("sqlite", "postgres"))
    parser.add_argument("--broker", default="redis", choices=("redis", "rabbitmq"))
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--check", action="store_true", help="exit 1 when the verdict is FAIL")
    args = parser.parse_args(argv)
    try:
        ok = run(args)
    except NotRunnable as missing:
        print(f"fairness: NOT RUN ({missing})")
        return 0
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())

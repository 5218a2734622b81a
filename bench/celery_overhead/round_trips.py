"""``--profile`` on PostgreSQL: what each task of the framework's pipeline sends the run store.

The worker's pool processes trace every run-store connection with libpq's protocol trace
(``AGENTLOOP_BENCH_TRACE_DIR``, set up by :mod:`bench.workflows_celery`)
and note each task's time window; one pipeline runs after a warm-up, and the round trips inside
each task's window are read off the trace (:func:`round_trips`). Printed per task: its round
trips, the durable commits among them (a ``COMMIT``, or a write sent in autocommit: each waits
for a WAL flush), the time the process waited on the server, and the task's own time; for
``agentloop.stages``, the same per stage. Beside them, the cost of one durable commit on the
same server in the same run (a one-row autocommit ``INSERT``): the floor a stage recorded
durably as it ends pays, once per stage.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

#: Statements that write: sent outside a transaction, each is a durable commit.
_WRITES = ("INSERT", "UPDATE", "DELETE", "WITH")
_COMMIT_PROBES = 50


@dataclass(frozen=True)
class Trip:
    """One round trip: the statement (its first words), when it was sent and how long the
    client waited for ``ReadyForQuery``, and whether it ended a durable commit."""

    statement: str
    sent: datetime
    wait: float
    commit: bool


def round_trips(lines: list[list[str]]) -> list[Trip]:
    """The round trips of one connection's trace (libpq's tab-separated lines: time, ``F`` or
    ``B``, length, message, fields). A simple ``Query`` is one; an extended query is ``Parse``
    (or a ``Bind`` of a statement prepared before) ... ``Sync``; ``ReadyForQuery`` ends it, and
    its status (``I``: idle, no transaction open) tells a commit from a statement inside one."""
    prepared: dict[str, str] = {}
    trips: list[Trip] = []
    pending, sent = "", None
    for fields in lines:
        when, side, message = datetime.fromisoformat(fields[0]), fields[1], fields[3]
        text = fields[4].strip() if len(fields) > 4 else ""
        if side == "F" and message == "Query":
            pending, sent = text.strip('"'), when
        elif side == "F" and message == "Parse":
            name, _, sql = text.partition(" ")
            pending = sql.strip('"')
            if name.strip('"'):
                prepared[name.strip('"')] = pending
        elif side == "F" and message == "Bind" and not pending:
            parts = text.split(" ")
            pending = prepared.get(parts[1].strip('"'), "?") if len(parts) > 1 else "?"
        elif side == "F" and message == "Sync":
            sent = when
        elif side == "B" and message == "ReadyForQuery" and sent is not None:
            first = (pending.split() or ["?"])[0].upper()
            idle = text.strip() == "I"
            commit = idle and (first == "COMMIT" or first in _WRITES)
            trips.append(Trip(pending[:60], sent, (when - sent).total_seconds(), commit))
            pending, sent = "", None
    return trips


def _traces(folder: str, after: datetime) -> dict[str, list[Trip]]:
    """Every pool process's round trips sent after ``after``, by process id (the whole trace is
    read: a statement prepared during the warm-up is named by its ``Parse`` there)."""
    by_pid: dict[str, list[Trip]] = {}
    for path in Path(folder).glob("*.trace"):
        pid = path.name.split(".")[0]
        lines = [line.split("\t") for line in path.read_text().splitlines()]
        trips = round_trips([fields for fields in lines if len(fields) >= 4])
        by_pid.setdefault(pid, []).extend(trip for trip in trips if trip.sent >= after)
    return by_pid


def profile_round_trips(*, stages: int) -> str:
    """One traced framework pipeline of ``stages`` trivial stages on PostgreSQL, per task."""
    from bench.celery_overhead.measure import durable_commit_seconds, run_once
    from bench.celery_overhead.rig import ROOT, rig
    from bench.celery_overhead.sides import build_sides
    from bench.workflows_celery import TRACE_ENV

    pipeline = next(side for side in build_sides(1, stages) if side.key == "fw_pipeline")
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-trips-") as folder:
        env = {TRACE_ENV: folder, "PYTHONPATH": str(ROOT)}
        with rig(store_kind="postgres", stages=stages, worker_env=env) as r:
            run_once(r, pipeline)  # warm-up: connections opened, statements prepared
            after = datetime.now()
            seconds, _, _ = run_once(r, pipeline)
            floor = durable_commit_seconds(r.database_url, _COMMIT_PROBES)
            r.worker.terminate()
        time.sleep(0.2)
        trips = _traces(folder, after)
        windows = [
            (name, datetime.fromisoformat(begun), datetime.fromisoformat(ended), path.name.split(".")[0])
            for path in Path(folder).glob("*.windows.json")
            for name, begun, ended in json.loads(path.read_text())
            if datetime.fromisoformat(begun) >= after
        ]
    out = [
        f"Round trips to PostgreSQL per task of one framework pipeline of {stages} trivial stages "
        f"({seconds:.3f} s from send to result; libpq trace of the pool processes, after a warm-up);",
        "commits = durable commits (a COMMIT, or a write in autocommit); wait = time the process "
        "waited on the server:",
        f"  {'task':<24} {'ms':>7} {'trips':>6} {'commits':>8} {'wait ms':>8}",
    ]
    for name, begun, ended, pid in sorted(windows, key=lambda window: window[1]):
        # a task's trips: from its start to the next task's start in its process (its last write
        # may leave after task_postrun)
        following = [window[1] for window in windows if window[3] == pid and window[1] > begun]
        until = min(following, default=datetime.max)
        inside = [trip for trip in trips.get(pid, []) if begun <= trip.sent < until]
        took = (ended - begun).total_seconds() * 1000
        commits = sum(trip.commit for trip in inside)
        waited = sum(trip.wait for trip in inside) * 1000
        out.append(f"  {name:<24} {took:7.1f} {len(inside):6d} {commits:8d} {waited:8.1f}")
        if name.endswith(".stages"):
            out.append(
                f"  {'  per stage':<24} {took / stages:7.2f} {len(inside) / stages:6.2f} "
                f"{commits / stages:8.2f} {waited / stages:8.2f}"
            )
        else:
            out.extend(f"      {trip.wait * 1000:6.2f} ms  {trip.statement}" for trip in inside)
    out.append(
        f"one durable commit on this server (a one-row autocommit INSERT, {len(floor)} in a row): "
        f"median {statistics.median(floor) * 1000:.2f} ms, min {min(floor) * 1000:.2f} ms, "
        f"max {max(floor) * 1000:.2f} ms"
    )
    return "\n".join(out)

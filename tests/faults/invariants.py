"""The guarantees, written once: checks of a finished batch of runs against the run store, the
broker and the model server's own request log. Each check takes plain records (so
``test_invariants.py`` shows each one failing on synthetic records that break it) and returns
:class:`Violation` values that say which run, which branch or queue, and what broke;
:func:`observe` reads those records off a live :class:`~tests.faults.rig.FaultRig`.

- :func:`one_end`: every run ends with one terminal status and one terminal event per path
  (exactly one for the run itself);
- :func:`no_rewrite`: no ended run and no finished branch result is ever written again (the
  audit triggers :func:`install_audit` puts on ``runs`` and ``checkpoints``);
- :func:`no_repeated_call`: no model call of a branch is made again from before the branch's last
  checkpoint (no call at all is made twice when nothing struck), none is missing;
- :func:`usage_counted`: every model call's tokens are in the run's usage;
- :func:`budget_stops`: a run past its token budget ends ``budget_exceeded``, soon after;
- :func:`nothing_left`: no message in a queue, a holding queue (``agentloop.wire.N``), an
  unacknowledged set or a lock, and no dead letter unaccounted for, once the workers are idle.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import text

from agentloop.orchestration.store import TERMINAL_STATUSES

if TYPE_CHECKING:
    from .rig import FaultRig

#: A progress event's statuses that end its path.
TERMINAL_EVENTS = ("completed", "failed")
#: ``[cell:<run tag>/<branch...>:<iteration>]`` (``tests/workflows/matrix.py``).
_CALL = re.compile(r"\[cell:([^/\]:]+)/([^\]:]*):(\d+)\]")


@dataclass(frozen=True, kw_only=True, slots=True)
class Violation:
    """One broken guarantee: which invariant, which run (its tag or id), where in it, what."""

    invariant: str
    run: str
    where: str
    what: str

    def __str__(self) -> str:
        where = f" {self.where}" if self.where else ""
        return f"{self.invariant}: run {self.run}{where}: {self.what}"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSeen:
    """What the store holds of one run: its status, usage, budget and terminal events by path."""

    tag: str
    run_id: str
    status: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    token_budget: int | None = None
    #: path -> how many ``completed``/``failed`` events it has ("" is the run itself).
    ends: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One request the model server received: the run tag, the branch, the iteration, its tokens."""

    tag: str
    branch: str
    iteration: int
    tokens: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Rewrite:
    """An audit row: an ended run's row or a finished branch's row written again."""

    table: str
    key: str
    change: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Census:
    """What the broker holds: queue -> messages ready (holding and dead-letter queues included),
    unacknowledged deliveries, lock keys, and the dead letters the cell expects."""

    queues: Mapping[str, int]
    unacked: int = 0
    locks: Sequence[str] = ()
    #: queue -> the messages it must hold (a dead-lettered poison message, a message parked for a
    #: newer worker); every other queue must be empty.
    expected: Mapping[str, int] = field(default_factory=dict)


# -- the checks --------------------------------------------------------------------------------------


def one_end(runs: Iterable[RunSeen]) -> list[Violation]:
    """Every run has a terminal status and exactly one terminal event for itself, at most one
    for each of its paths."""
    found = []
    for run in runs:
        if run.status not in TERMINAL_STATUSES:
            found.append(Violation(invariant="one end", run=run.tag, where="", what=f"status {run.status}"))
        for path, count in sorted(run.ends.items()):
            if count > 1:
                what = f"{count} terminal events"
                found.append(Violation(invariant="one end", run=run.tag, where=f"path {path!r}", what=what))
        if run.ends.get("", 0) == 0:
            found.append(Violation(invariant="one end", run=run.tag, where="", what="no terminal event"))
    return found


def no_rewrite(rewrites: Iterable[Rewrite], tags: Mapping[str, str]) -> list[Violation]:
    """Each audit row is a rewrite (``tags``: run id -> tag, for the message)."""
    found = []
    for row in rewrites:
        run_id = row.key.split("|", 1)[0]
        run = tags.get(run_id, run_id[:8])
        where = f"{row.table} {row.key.split('|', 1)[1]!r}" if "|" in row.key else row.table
        found.append(Violation(invariant="no rewrite", run=run, where=where, what=row.change[:300]))
    return found


def no_repeated_call(
    calls: Sequence[Call],
    expected: Mapping[tuple[str, str], int],
    *,
    before: Mapping[tuple[str, str], tuple[bool, int]] | None = None,
    since: int = 0,
) -> list[Violation]:
    """Every expected iteration (``(tag, branch)`` -> its number of calls) was called; and no
    call was made again: with ``before`` (per branch, what the store held when the fault struck:
    finished, checkpoint iteration) none of ``calls[since:]`` is of a finished branch or of an
    iteration before its checkpoint; without, no iteration is called twice."""
    found = []
    counts = Counter((c.tag, c.branch, c.iteration) for c in calls)
    for (tag, branch), n in sorted(expected.items()):
        missing = [i for i in range(n) if counts[(tag, branch, i)] == 0]
        if missing:
            what = f"iterations {missing[:5]} made no model call"
            found.append(
                Violation(invariant="no repeated call", run=tag, where=f"branch {branch}", what=what)
            )
    if before is None:
        for (tag, branch, iteration), n in sorted(counts.items()):
            if n > 1:
                what = f"iteration {iteration} called the model {n} times"
                found.append(
                    Violation(invariant="no repeated call", run=tag, where=f"branch {branch}", what=what)
                )
        return found
    after = Counter((c.tag, c.branch, c.iteration) for c in calls[since:])
    for (tag, branch), (finished, checkpoint) in sorted(before.items()):
        again = sorted(i for (t, b, i) in after if (t, b) == (tag, branch) and (finished or i < checkpoint))
        if again:
            state = "had finished" if finished else f"had its checkpoint at {checkpoint}"
            what = f"{state}, and called iterations {again[:5]} again"
            found.append(
                Violation(invariant="no repeated call", run=tag, where=f"branch {branch}", what=what)
            )
    return found


def usage_counted(runs: Iterable[RunSeen], calls: Sequence[Call], *, exact: bool = True) -> list[Violation]:
    """Each run's recorded tokens are the tokens of its calls at the model server: equal when
    ``exact`` (nothing struck), else at least each called iteration's once and at most all calls'."""
    billed: Counter[str] = Counter()
    needed: dict[str, dict[tuple[str, int], int]] = {}
    for call in calls:
        billed[call.tag] += call.tokens
        needed.setdefault(call.tag, {})[(call.branch, call.iteration)] = call.tokens
    found = []
    for run in runs:
        recorded = run.input_tokens + run.output_tokens
        total, least = billed[run.tag], sum(needed.get(run.tag, {}).values())
        if exact and recorded != total:
            what = f"{recorded} tokens recorded, the model server answered {total}"
        elif not exact and not least <= recorded <= total:
            what = f"{recorded} tokens recorded, outside [{least}, {total}] (each call once .. every call)"
        else:
            continue
        found.append(Violation(invariant="usage counted", run=run.tag, where="", what=what))
    return found


def budget_stops(runs: Iterable[RunSeen], calls: Sequence[Call], *, in_flight: int = 1) -> list[Violation]:
    """A run whose model calls passed its budget ends ``budget_exceeded``, and makes at most
    ``in_flight`` calls (its concurrent branches) once the budget is spent."""
    billed: Counter[str] = Counter()
    largest: Counter[str] = Counter()
    for call in calls:
        billed[call.tag] += call.tokens
        largest[call.tag] = max(largest[call.tag], call.tokens)
    found = []
    for run in runs:
        if run.token_budget is None:
            continue
        total, budget = billed[run.tag], run.token_budget
        if total > budget and run.status != "budget_exceeded":
            what = f"the model answered {total} tokens of a {budget} budget, and the run ended {run.status}"
            found.append(Violation(invariant="budget stops", run=run.tag, where="", what=what))
        if total > budget + in_flight * largest[run.tag]:
            what = f"{total} tokens on a {budget} budget: calls went on after it was spent"
            found.append(Violation(invariant="budget stops", run=run.tag, where="", what=what))
    return found


def nothing_left(census: Census) -> list[Violation]:
    """No queue (holding queues included) holds a message but those it must (dead letters, parked
    messages), nothing is unacknowledged, no lock is held."""
    found = []
    for name in sorted(set(census.queues) | set(census.expected)):
        depth, wanted = census.queues.get(name, 0), census.expected.get(name, 0)
        if depth != wanted:
            what = f"{depth} messages, {wanted} expected"
            found.append(Violation(invariant="nothing left", run="-", where=f"queue {name}", what=what))
    if census.unacked:
        what = f"{census.unacked} deliveries unacknowledged"
        found.append(Violation(invariant="nothing left", run="-", where="broker", what=what))
    for lock in census.locks:
        found.append(Violation(invariant="nothing left", run="-", where=f"lock {lock}", what="still held"))
    return found


def parked_once(parks: int, parked: int) -> list[Violation]:
    """A message parked for a newer worker is parked once (``parks``: the worker's park
    warnings; ``parked``: the messages sent for a newer worker), not over and over."""
    if parks == parked:
        return []
    what = f"{parks} parks of {parked} too-new messages"
    return [Violation(invariant="nothing left", run="-", where="holding queues", what=what)]


# -- reading them off the rig ------------------------------------------------------------------------

AUDIT_TABLE = "matrix_audit"
_AUDIT_SQL = f"""
CREATE TABLE IF NOT EXISTS {AUDIT_TABLE} (
    id bigserial PRIMARY KEY, tbl text NOT NULL, key text NOT NULL, change text NOT NULL
);
CREATE OR REPLACE FUNCTION matrix_audit_runs() RETURNS trigger AS $$
BEGIN
    IF OLD.status IN ({", ".join(f"'{s}'" for s in sorted(TERMINAL_STATUSES))})
       AND (to_jsonb(NEW) - 'cancel_requested') IS DISTINCT FROM (to_jsonb(OLD) - 'cancel_requested') THEN
        INSERT INTO {AUDIT_TABLE} (tbl, key, change)
        VALUES ('runs', OLD.id, 'status ' || OLD.status || ' -> ' || NEW.status || ', tokens '
                || (OLD.input_tokens + OLD.output_tokens) || ' -> '
                || (NEW.input_tokens + NEW.output_tokens) || ', output '
                || coalesce(OLD.output::text, 'null') || ' -> ' || coalesce(NEW.output::text, 'null'));
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION matrix_audit_checkpoints() RETURNS trigger AS $$
BEGIN
    IF OLD.finished AND (NOT NEW.finished OR NEW.result::text IS DISTINCT FROM OLD.result::text) THEN
        INSERT INTO {AUDIT_TABLE} (tbl, key, change)
        VALUES ('checkpoints', OLD.run_id || '|' || OLD.path,
                'result ' || coalesce(OLD.result::text, 'null') || ' -> '
                || coalesce(NEW.result::text, 'null'));
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS matrix_audit ON runs;
CREATE TRIGGER matrix_audit BEFORE UPDATE ON runs FOR EACH ROW EXECUTE FUNCTION matrix_audit_runs();
DROP TRIGGER IF EXISTS matrix_audit ON checkpoints;
CREATE TRIGGER matrix_audit BEFORE UPDATE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION matrix_audit_checkpoints();
"""


def install_audit(rig: FaultRig) -> None:
    """Audit triggers on the rig's private database: an ended run's row or a finished branch's
    result written again leaves a row in :data:`AUDIT_TABLE` (idempotent)."""
    with rig.store.engine.begin() as connection:
        connection.exec_driver_sql(_AUDIT_SQL)


def rewrites(rig: FaultRig, since: int = 0) -> list[Rewrite]:
    """The audit rows after id ``since``."""
    with rig.store.engine.connect() as connection:
        rows = connection.execute(
            text(f"SELECT tbl, key, change FROM {AUDIT_TABLE} WHERE id > :since ORDER BY id"),
            {"since": since},
        ).all()
    return [Rewrite(table=str(t), key=str(k), change=str(c)) for t, k, c in rows]


def audit_mark(rig: FaultRig) -> int:
    with rig.store.engine.connect() as connection:
        return int(connection.execute(text(f"SELECT coalesce(max(id), 0) FROM {AUDIT_TABLE}")).scalar_one())


def calls_seen(rig: FaultRig, since: int = 0, tokens: int = 0) -> list[Call]:
    """The matrix calls the model server received after its first ``since`` requests, each worth
    ``tokens`` (the rig's model answers every matrix call with the same usage)."""
    found = []
    for request in list(rig.model.requests)[since:]:
        for tag, branch, iteration in _CALL.findall(json.dumps(request.body)):
            found.append(Call(tag=tag, branch=branch, iteration=int(iteration), tokens=tokens))
    return found


def run_seen(rig: FaultRig, run_id: str, tag: str) -> RunSeen:
    record = rig.store.get_run(run_id)
    ends: Counter[str] = Counter()
    for _, event in rig.store.events(run_id):
        if event.get("status") in TERMINAL_EVENTS and event.get("phase") != "delta":
            ends[str(event.get("path", ""))] += 1
    if record is None:
        return RunSeen(tag=tag, run_id=run_id, status=None, ends=ends)
    return RunSeen(
        tag=tag,
        run_id=run_id,
        status=record.status,
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        token_budget=record.token_budget,
        ends=ends,
    )


def census(rig: FaultRig, expected: Mapping[str, int] | None = None) -> Census:
    """What the rig's broker holds now (every queue of the workers' name, holding and
    dead-letter queues included; on Redis kombu's unacknowledged set and its lock too)."""
    queue = rig.broker.queue
    if rig.broker.kind == "redis":
        queues: dict[str, int] = {}
        for key in rig.redis.scan_iter(f"{queue}*"):
            if rig.redis.type(key) == b"list":
                queues[key.decode()] = int(rig.redis.llen(key))
        locks = [name for name in ("unacked_mutex",) if rig.redis.exists(name)]
        return Census(
            queues=queues, unacked=int(rig.redis.hlen("unacked")), locks=locks, expected=expected or {}
        )
    assert rig.broker.node is not None
    listing = rig.broker.node.ctl(
        "list_queues", "-q", "--no-table-headers", "name", "messages_ready", "messages_unacknowledged"
    )
    queues, unacked = {}, 0
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith(queue) and parts[1].isdigit() and parts[2].isdigit():
            queues[parts[0]] = int(parts[1])
            unacked += int(parts[2])
    return Census(queues=queues, unacked=unacked, expected=expected or {})


def idle_census(rig: FaultRig, expected: Mapping[str, int] | None = None, timeout: float = 30.0) -> Census:
    """:func:`census` once it shows nothing left, or after ``timeout`` (a task acknowledges its
    message after it wrote its run's end: the census waits for the workers to be idle)."""
    deadline = time.monotonic() + timeout
    found = census(rig, expected)
    while nothing_left(found) and time.monotonic() < deadline:
        time.sleep(0.25)
        found = census(rig, expected)
    return found


def all_checks(
    runs: Sequence[RunSeen],
    calls: Sequence[Call],
    expected: Mapping[tuple[str, str], int],
    found_rewrites: Sequence[Rewrite],
    broker: Census,
    *,
    before: Mapping[tuple[str, str], tuple[bool, int]] | None = None,
    since: int = 0,
    exact_usage: bool = True,
    in_flight: int = 1,
    check_calls: bool = True,
) -> list[Violation]:
    """Every invariant of the module over one cell's records."""
    tags = {run.run_id: run.tag for run in runs}
    found = [*one_end(runs), *no_rewrite(found_rewrites, tags)]
    if check_calls:
        found += no_repeated_call(calls, expected, before=before, since=since)
    found += usage_counted([r for r in runs if r.token_budget is None], calls, exact=exact_usage)
    found += budget_stops(runs, calls, in_flight=in_flight)
    return [*found, *nothing_left(broker)]


def summary(violations: Sequence[Violation], limit: int = 6) -> str:
    """The violations, one a line (the first ``limit``, and how many more)."""
    lines = [str(v) for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"... and {len(violations) - limit} more")
    return "\n".join(lines)

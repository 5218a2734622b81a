"""What became of each run of a scenario, and the table that says it.

A run is classified from its run record (the store) and its result (the result backend),
once every run has ended or a generous bound has passed:

- **completed**: the record's status is ``succeeded``;
- **failed (reason)**: the record has another terminal status (``failed``, ``degraded``,
  ``cancelled``, ...) and an error text;
- **failed (no reason)**: a terminal status other than ``succeeded`` with no error text;
- **lost**: after the bound, no terminal record and no result: nobody will ever learn how it
  ended (a client waiting on ``result.get()`` waits forever); a launch still ``SENT`` (the mark
  its producer wrote, :data:`~agentloop.orchestration.wire.LAUNCH_SENT_STATE`) is one too;
- **stuck**: after the bound, no terminal record, yet the result backend has an outcome (the
  record says ``running`` forever, or there is none).

Lost, stuck and failed-without-reason must be 0 in every scenario; each scenario adds what it
expects of its runs (all completed, or every poisoned message failed with a reason, ...).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table

from agentloop.orchestration.store import RunStore
from agentloop.orchestration.wire import LAUNCH_SENT_STATE


class Outcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed (reason)"
    NO_REASON = "failed (no reason)"
    LOST = "lost"
    STUCK = "stuck"


#: The result backend's states of a run nobody has decided yet.
_UNDECIDED = frozenset({"PENDING", LAUNCH_SENT_STATE, "RECEIVED", "STARTED", "PROGRESS", "RETRY"})
#: Outcomes no scenario may have.
NEVER = (Outcome.NO_REASON, Outcome.LOST, Outcome.STUCK)


def error_text(error: Any) -> str:
    """The human-readable text of a recorded error ('' when there is none)."""
    if isinstance(error, Mapping):
        return " ".join(str(error.get(key) or "") for key in ("type", "message")).strip()
    return "" if error is None else str(error).strip()


@dataclass(frozen=True, kw_only=True, slots=True)
class RunCheck:
    """One run's fate: its outcome, the record's status and error, the result backend's state."""

    run_id: str
    label: str
    outcome: Outcome
    status: str | None
    error: str
    result_state: str
    output: Any = None
    #: What the result backend holds when it is a failure (the exception's type and text).
    result_error: str = ""
    #: For a run that did not end: where it stopped (its child runs' states, its last events), so
    #: a failure on a CI machine says more than "lost".
    trail: str = ""


def classify(store: RunStore, app: Any, run_id: str, label: str) -> RunCheck:
    """The outcome of ``run_id`` now (see the module doc)."""
    record = store.get_run(run_id)
    result = app.AsyncResult(run_id)
    state = str(result.state)
    result_error = f"{type(result.result).__name__}: {result.result}" if state == "FAILURE" else ""
    status = record.status if record is not None else None
    error = error_text(record.error) if record is not None else ""
    if record is not None and record.is_finished:
        if record.status == "succeeded":
            outcome = Outcome.COMPLETED
        else:
            outcome = Outcome.FAILED if error else Outcome.NO_REASON
    else:
        outcome = Outcome.LOST if state in _UNDECIDED else Outcome.STUCK
    output = record.output if record is not None else None
    trail = _trail(store, run_id) if outcome in (Outcome.LOST, Outcome.STUCK) else ""
    return RunCheck(
        run_id=run_id,
        label=label,
        outcome=outcome,
        status=status,
        error=error,
        result_state=state,
        output=output,
        result_error=result_error[:200],
        trail=trail,
    )


def _trail(store: RunStore, run_id: str, last: int = 6) -> str:
    """The child runs' ``runnable:status`` and the run's last ``last`` events' ``phase:status@path``."""
    children = store.list_runs(parent_run_id=run_id, limit=20)
    events = store.events(run_id)[-last:]
    steps = [f"{event.get('phase')}:{event.get('status')}@{event.get('path')}" for _, event in events]
    kids = [f"{child.runnable}:{child.status}" for child in children]
    return f"children [{', '.join(kids)}] last events [{', '.join(steps)}]"


def settle(
    store: RunStore,
    app: Any,
    runs: Mapping[str, str],
    *,
    bound: float,
    alive: Callable[[], bool] | None = None,
    poll: float = 0.25,
) -> dict[str, RunCheck]:
    """Wait until every run of ``runs`` (run id -> label) has a terminal record, ``bound`` seconds
    pass, or ``alive`` (the worker) says no for 3 s; then classify each run."""
    deadline = time.monotonic() + bound
    pending = set(runs)
    dead_since: float | None = None
    while pending and time.monotonic() < deadline:
        for run_id in list(pending):
            record = store.get_run(run_id)
            if record is not None and record.is_finished:
                pending.discard(run_id)
        if alive is not None and not alive():
            dead_since = dead_since or time.monotonic()
            if time.monotonic() - dead_since > 3:
                break
        if pending:
            time.sleep(poll)
    return {run_id: classify(store, app, run_id, label) for run_id, label in runs.items()}


@dataclass(kw_only=True)
class ScenarioResult:
    """A scenario's runs, what it found wrong, and how long it took."""

    name: str
    runs: dict[str, RunCheck] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, outcome: Outcome) -> int:
        return sum(1 for check in self.runs.values() if check.outcome is outcome)

    @property
    def passed(self) -> bool:
        return not self.problems and all(self.count(outcome) == 0 for outcome in NEVER)

    def expect(self, checks: Iterable[RunCheck], allowed: Sequence[Outcome], why: str = "") -> None:
        """Note a problem for each run whose outcome is not in ``allowed``."""
        for check in checks:
            if check.outcome not in allowed:
                wanted = " or ".join(allowed)
                detail = f"status={check.status} result={check.result_state}"
                if check.error:
                    detail += f" error={check.error[:160]!r}"
                if check.result_error and check.outcome is not Outcome.FAILED:
                    detail += f" result={check.result_error!r}"
                if check.trail:
                    detail += f" {check.trail}"
                self.problems.append(
                    f"{check.label} [{check.run_id[:8]}]: {check.outcome}, expected {wanted} ({detail})"
                    + (f"; {why}" if why else "")
                )

    def summary_line(self) -> str:
        counts = Counter(check.outcome for check in self.runs.values())
        parts = ", ".join(f"{outcome}={counts.get(outcome, 0)}" for outcome in Outcome)
        return f"{self.name}: tried={len(self.runs)} {parts} -> {'ok' if self.passed else 'FAIL'}"


def print_table(results: Sequence[ScenarioResult], *, title: str, console: Console | None = None) -> None:
    """The table of every scenario's figures, then each failing scenario's problems."""
    console = console or Console()
    table = Table(title=title)
    table.add_column("scenario")
    table.add_column("tried", justify="right")
    for outcome in Outcome:
        table.add_column(str(outcome), justify="right")
    table.add_column("s", justify="right")
    table.add_column("verdict")
    for result in results:
        verdict = "[green]ok[/green]" if result.passed else "[red]FAIL[/red]"
        counts = [str(result.count(outcome)) for outcome in Outcome]
        table.add_row(result.name, str(len(result.runs)), *counts, f"{result.seconds:.0f}", verdict)
    console.print(table)
    console.print(
        "lost: no terminal record and no result after the bound; stuck: a result but no terminal "
        "record after the bound; lost, stuck and failed (no reason) must be 0."
    )
    for result in results:
        if result.passed:
            continue
        console.print(f"[bold red]{result.name}[/bold red]")
        for problem in result.problems or ["lost, stuck or failed-without-reason runs (see the table)"]:
            console.print(f"  - {problem}", markup=False, highlight=False)

"""Faults that arrive as messages or answers: poison messages, duplicate run ids, a model that fails.

- A poison message is rejected at the edge with a recorded failure (its run record ends with an
  error, its result is a failure a client's ``result.get()`` returns) and acknowledged: the
  worker lives, and the next run (the canary) completes.
- A run id is an idempotency key: relaunching a finished run, with the same request or another
  runnable, an unregistered one, a bad budget or a bad context, and a hand-sent
  ``agentloop.finalize``, leave the run as it was: its record, its events, its result.
- A model that answers 429s, 500s, nothing in time, or malformed tool calls makes the run
  ``degraded`` (or failed), with the error; the answer never pretends the question was off topic.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from celery import states

from agentloop.orchestration.wire import FINALIZE, LAUNCH

from .chaos_model import FAULTS, marker
from .poison import send_poison
from .rig import LONG, FaultRig
from .tally import Outcome, ScenarioResult, error_text, settle
from .workload import ScenarioFn, Size

_CANARY_BOUND = 30.0


def poison(kind: str) -> ScenarioFn:
    """The scenario of one poison message ``kind`` (see :mod:`.poison`), then a canary run."""

    def run(rig: FaultRig, size: Size) -> ScenarioResult:
        result = ScenarioResult(name=f"poison: {kind}")
        rig.use_profile(LONG)
        poison_id = send_poison(rig.foreign, kind)
        canary = rig.launch("parity.count", 1)
        runs = {poison_id: f"poison {kind}", canary: "canary parity.count"}
        result.runs = settle(rig.store, rig.app, runs, bound=_CANARY_BOUND, alive=rig.worker_ok)
        why = "a bad message is rejected with a recorded failure"
        result.expect([result.runs[poison_id]], [Outcome.FAILED], why)
        result.expect([result.runs[canary]], [Outcome.COMPLETED], "the worker goes on with the next run")
        state = rig.foreign.AsyncResult(poison_id).state
        if state not in states.READY_STATES:
            result.problems.append(f"the poisoned message's result is {state}: result.get() waits forever")
        return result

    return run


def _relaunch(runnable: str, **extra: Any) -> Callable[[FaultRig, str, int], None]:
    def send(rig: FaultRig, run_id: str, index: int) -> None:
        kwargs = {"runnable": runnable, "input": index, "context": {}, "run_id": run_id, **extra}
        rig.foreign.send_task(LAUNCH, kwargs=kwargs, task_id=run_id)

    return send


def _client_relaunch(runnable: str) -> Callable[[FaultRig, str, int], None]:
    def send(rig: FaultRig, run_id: str, index: int) -> None:
        rig.launch(runnable, index, run_id=run_id)

    return send


def _forged_finalize(rig: FaultRig, run_id: str, index: int) -> None:
    rig.foreign.send_task(FINALIZE, args=({"forged": True}, run_id), task_id=str(uuid.uuid4()))


#: Each way of reusing the id of a run that succeeded.
ATTACKS: dict[str, Callable[[FaultRig, str, int], None]] = {
    "the same request again": _client_relaunch("parity.count"),
    "another runnable": _client_relaunch("parity.three_stages"),
    "an unregistered runnable": _relaunch("no.such.workflow"),
    "a bad budget": _relaunch("parity.count", token_budget=-5),
    "a bad context": _relaunch("parity.count", context="not an object"),
    "a hand-sent agentloop.finalize": _forged_finalize,
}


def _snapshot(rig: FaultRig, run_id: str) -> dict[str, Any]:
    record = rig.store.get_run(run_id)
    result = rig.app.AsyncResult(run_id)
    return {
        "status": record.status if record else None,
        "output": record.output if record else None,
        "error": error_text(record.error) if record else "",
        "finished_at": record.finished_at if record else None,
        "events": len(rig.store.events(run_id)),
        "result": (result.state, repr(result.result)[:80]),
    }


def duplicate_ids(rig: FaultRig, size: Size) -> ScenarioResult:
    """Runs that succeeded, then each attacked once through its id (see :data:`ATTACKS`)."""
    result = ScenarioResult(name="duplicate run ids")
    rig.use_profile(LONG)
    originals = {rig.launch("parity.count", index): attack for index, attack in enumerate(ATTACKS)}
    first = settle(rig.store, rig.app, originals, bound=_CANARY_BOUND, alive=rig.worker_ok)
    result.expect(first.values(), [Outcome.COMPLETED], "before any duplicate was sent")
    before = {run_id: _snapshot(rig, run_id) for run_id in originals}
    for index, (run_id, attack) in enumerate(originals.items()):
        ATTACKS[attack](rig, run_id, index)
    if not rig.wait_idle(_CANARY_BOUND):
        result.problems.append("the duplicates were still queued or unacknowledged after 30 s")
    result.runs = settle(rig.store, rig.app, originals, bound=_CANARY_BOUND, alive=rig.worker_ok)
    for run_id, attack in originals.items():
        after = _snapshot(rig, run_id)
        changed = {
            key: (before[run_id][key], after[key]) for key in after if after[key] != before[run_id][key]
        }
        if changed:
            diff = "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in changed.items())
            result.problems.append(f"{attack} rewrote run {run_id[:8]}: {diff}"[:400])
    result.expect(result.runs.values(), [Outcome.COMPLETED], "a finished run stays as it ended")
    return result


def model_outages(rig: FaultRig, size: Size) -> ScenarioResult:
    """Record-search questions whose every model call fails (each kind of :data:`FAULTS`), and
    one whose calls succeed."""
    result = ScenarioResult(name="model outages")
    rig.use_profile(LONG)
    question = "Which software companies are in Germany?"
    faulty: dict[str, str] = {}
    for kind in FAULTS:
        for _ in range(size.per_fault):
            run_id = rig.launch("record_search.ask", {"message": f"{question} {marker(kind)}"}, context={})
            faulty[run_id] = f"model {kind}"
    control = rig.launch("record_search.ask", {"message": question}, context={})
    runs = {**faulty, control: "model healthy"}
    result.runs = settle(rig.store, rig.app, runs, bound=size.bound, alive=rig.worker_ok)
    result.expect([result.runs[control]], [Outcome.COMPLETED])
    checks = [result.runs[run_id] for run_id in faulty]
    result.expect(
        checks, [Outcome.FAILED], "a model outage is recorded as degraded (or failed), with the error"
    )
    for check in checks:
        if check.outcome is Outcome.FAILED and check.status not in ("degraded", "failed"):
            result.problems.append(f"{check.label} [{check.run_id[:8]}]: ended {check.status}")
        message = check.output.get("message", "") if isinstance(check.output, dict) else ""
        if "rephrase" in message:
            result.problems.append(
                f"{check.label} [{check.run_id[:8]}]: answered {message!r}, as for an off-topic question"
            )
    return result

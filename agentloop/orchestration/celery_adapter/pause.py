"""A task paused for a person's answer, and the ``agentloop.resume`` task that continues it.

Pausing records the question with the message that re-sends the paused task
(``Task.signature_from_request``: the same task id, chain, chord and group, as a
Celery retry re-sends it), marks the run ``waiting``, schedules the expiry, and
ends the task with ``Ignore``: no result, so a chord's counter (the redis backend's
``on_chord_part_return``) is not moved and the merge waits. Resuming checks the
answer against the question's schema, settles the wait (one conditional write: a
second, different answer is refused), marks the run running, re-sends that message
and notes the wait resumed; the task runs again from the loop's last checkpoint, its
question answered, and counts in its chord when it ends.

An accepted answer always sends the run on, whichever process dies or server is away
between those writes: the settled wait is the record of what is left to do. The same
answer again (the resume's own message redelivered after its worker died, its Celery
retry after the store or the broker stayed away, a client that asks again) finds the
wait settled with that answer and not resumed, and sends the message; a resume for a
wait already resumed is refused, and sends nothing. ``agentloop.resume_settled`` (on beat's schedule) sends on
what no resume came back for. A paused task delivered again after it died between its
own writes records nothing twice, and schedules its expiry again.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Task
from celery.exceptions import Ignore
from kombu.exceptions import OperationalError

from agentloop.actions.errors import InvalidAnswerError
from agentloop.actions.human import RunPaused, check_answer
from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.orchestration.celery_adapter.deliveries import unmarked_signature
from agentloop.orchestration.celery_adapter.dependencies import AppDependencies, dependencies_of
from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.store.waits import ANSWERED, EXPIRED, PENDING, Wait
from agentloop.orchestration.wire import RESUME

#: How a paused task's message is sent again while the broker is away (kombu's retry policy,
#: some 40 s in all); past it the resume fails and is retried, or ``resume_settled`` sends it.
RESEND_RETRY: dict[str, float] = {
    "max_retries": 10,
    "interval_start": 0.5,
    "interval_step": 1,
    "interval_max": 5,
}
#: How long a settled wait may stay unresumed before ``agentloop.resume_settled`` sends it on:
#: longer than a resume takes with its retries, so it does not race one still going.
SETTLED_GRACE_SECONDS = 120.0
#: The options ``agentloop.resume`` and ``agentloop.resume_settled`` are registered with: a store
#: or broker that stays away past its retries retries the task (with the same answer, which then
#: sends the settled wait on).
RESUME_TASK_OPTIONS: dict[str, Any] = {
    "autoretry_for": (StoreUnavailableError, OperationalError),
    "max_retries": 10,
    "retry_backoff": 5,
    "retry_backoff_max": 60,
    "retry_jitter": True,
}


def pause_task(task: Task, pause: RunPaused, run_id: str) -> None:
    """Record the wait of ``task`` (paused by ``pause``) and end the task with ``Ignore``."""
    record_pause(task, pause, run_id, dict(task.signature_from_request()))
    raise Ignore()


def record_pause(task: Task, pause: RunPaused, run_id: str, signature: dict[str, Any]) -> None:
    """Record the wait of a run paused by ``pause`` in ``task``; ``signature`` is the message
    its answer sends again (the task's own, or for a run of a batch pack its own launch)."""
    deps = dependencies_of(task.app)
    waits, question = deps.waits, pause.question
    if waits is None:
        raise RuntimeError(f"run {run_id} cannot pause: its run store keeps no questions")
    message = json.loads(json.dumps(signature, default=str))
    unmarked_signature(message)  # it ran: sent again, it reads its checkpoint (deliveries.py)
    expires_at = None
    if question.expires_in is not None:
        expires_at = datetime.now(UTC) + timedelta(seconds=question.expires_in)
    wait = Wait(run_id=run_id, path=pause.path, question=question, message=message, expires_at=expires_at)
    recorded = waits.record(wait)
    if recorded:
        event = ProgressEvent(
            run_id=run_id,
            path=pause.path,
            runnable="",
            iteration=0,
            max_iterations=0,
            phase="waiting",
            status=ProgressStatus.PROGRESS,
            message=question.prompt,
            data={"question": wait.describe()},
        )
        deps.store.append_events(run_id, [event.to_dict()])
    else:  # asked before: by this task, delivered again after it died, maybe before its expiry was sent
        wait = waits.get(run_id, pause.path, question.key) or wait
    if wait.status == PENDING and wait.expires_at is not None:
        expiry = {"run_id": run_id, "path": pause.path, "key": question.key, "expire": True}
        countdown = expiry_countdown(wait.expires_at, datetime.now(UTC))
        task.app.signature(RESUME, kwargs=expiry).apply_async(countdown=countdown)  # a second one is refused
    waits.mark_run_waiting(run_id)  # not when an answer came first: that sent the task on already


def expiry_countdown(expires_at: datetime, now: datetime) -> int | None:
    """The whole seconds from ``now`` to ``expires_at``, rounded up (``None``: due now).

    Whole seconds because RabbitMQ's native delayed delivery takes no less than one and drops
    the fraction (kombu refuses a delay under one second); rounded up so the expiry never
    arrives before its time, only up to a second after it."""
    seconds = math.ceil((expires_at - now).total_seconds())
    return seconds if seconds > 0 else None


def resume(
    self: Task,
    run_id: str,
    answer: Any = None,
    path: str | None = None,
    key: str | None = None,
    expire: bool = False,
) -> dict[str, Any]:
    """Answer the question run ``run_id`` waits for and continue the run where it stopped.

    ``path`` and ``key`` pick the question when several wait; ``expire`` (the expiry's own
    message) ends a wait whose time is up. Returns ``{"accepted": True, "wait": ...}``, or
    ``{"accepted": False, "reason": ...}`` with nothing changed (no such wait, a wrong answer,
    already answered; ``"not_found": True`` too when the store knows no run ``run_id``). An
    accepted answer's ``status`` is its wait's, as settled (``answered`` or ``expired``).
    """
    deps = dependencies_of(self.app)
    run_id, waits = str(run_id), deps.waits
    if waits is None:
        return {"accepted": False, "reason": "this run store keeps no questions"}
    matching = [
        wait
        for wait in waits.waits(run_id)
        if (path is None or wait.path == path) and (key is None or wait.key == key)
    ]
    candidates = [wait for wait in matching if wait.status == PENDING]
    if not matching and deps.store.get_run(run_id) is None:
        return {"accepted": False, "reason": f"no such run {run_id}", "not_found": True}
    if not candidates:
        return _again(self, deps, run_id, matching, answer, expire)
    if len(candidates) != 1:
        return _refused(run_id, candidates)
    wait = candidates[0]
    if expire:
        if wait.expires_at is None or wait.expires_at > datetime.now(UTC) + timedelta(seconds=1):
            return {"accepted": False, "reason": "the question has not expired"}
        status, settled = EXPIRED, None
    else:
        try:
            settled = check_answer(wait.question, answer)
        except InvalidAnswerError as wrong:
            return {"accepted": False, "reason": wrong.reason, "wait": wait.describe()}
        status = ANSWERED
    if not waits.settle(run_id, wait.path, wait.key, status=status, answer=settled):
        # settled meanwhile: by another resume, or by this one's write whose reply was lost
        return _again(self, deps, run_id, waits.waits(run_id), answer, expire, only=wait)
    wait = replace(wait, status=status, answer=settled)
    _send_on(self.app, deps, wait)
    return {"accepted": True, "status": status, "wait": wait.describe()}  # the wait as settled


def _again(
    task: Task,
    deps: AppDependencies,
    run_id: str,
    matching: list[Wait],
    answer: Any,
    expire: bool,
    only: Wait | None = None,
) -> dict[str, Any]:
    """A resume for a settled wait: refused once the wait was sent on; before, it sends the wait
    on, and is accepted when it brings the same answer (or expiry), refused otherwise."""
    settled = [w for w in matching if w.status != PENDING]
    if only is not None:
        settled = [w for w in settled if (w.path, w.key) == (only.path, only.key)]
    left = [w for w in settled if not w.resumed]
    if len(settled) != 1 and len(left) == 1:
        settled = left
    if len(settled) != 1:
        return _refused(run_id, [])
    wait = settled[0]
    if wait.resumed:  # the run went on with its answer: any other resume is refused
        return {"accepted": False, "reason": "the question was answered already", "wait": wait.describe()}
    _send_on(task.app, deps, wait)  # whatever this resume brings, the settled answer goes on
    if not _same_outcome(wait, answer, expire):
        reason = "the question expired" if wait.status == EXPIRED else "the question was answered already"
        return {"accepted": False, "reason": reason, "wait": wait.describe()}
    return {"accepted": True, "status": wait.status, "wait": wait.describe()}


def _same_outcome(wait: Wait, answer: Any, expire: bool) -> bool:
    if expire or wait.status == EXPIRED:
        return expire and wait.status == EXPIRED
    try:
        return bool(check_answer(wait.question, answer) == wait.answer)
    except InvalidAnswerError:
        return False


def _send_on(app: Any, deps: AppDependencies, wait: Wait) -> None:
    """Continue the run of settled ``wait``: marked running when nothing else waits, its paused
    task sent again, the wait noted resumed. Each step may be done again: one that fails (the
    store or the broker away) raises, and the next resume of the same answer does what is left."""
    waits = deps.waits
    assert waits is not None
    if not waits.waits(wait.run_id, status=PENDING) and not deps.store.mark_running(wait.run_id):
        waits.mark_resumed(wait.run_id, wait.path, wait.key)  # the run ended meanwhile: nothing to continue
        return
    if wait.message is not None:
        app.signature(wait.message).apply_async(retry=True, retry_policy=RESEND_RETRY)
    waits.mark_resumed(wait.run_id, wait.path, wait.key)


def resume_settled(self: Task, older_than: float = SETTLED_GRACE_SECONDS) -> dict[str, Any]:
    """Send on every wait settled more than ``older_than`` seconds ago and never resumed: what a
    resume left when its worker died, or its broker or store stayed away past every retry."""
    deps = dependencies_of(self.app)
    if deps.waits is None:
        return {"resumed": 0}
    before = datetime.now(UTC) - timedelta(seconds=float(older_than))
    left = deps.waits.unresumed(settled_before=before)
    for wait in left:
        _send_on(self.app, deps, wait)
    return {"resumed": len(left)}


def _refused(run_id: str, candidates: list[Wait]) -> dict[str, Any]:
    if not candidates:
        return {"accepted": False, "reason": f"run {run_id} waits for no such question"}
    waiting = [{"path": wait.path, "key": wait.key} for wait in candidates]
    return {"accepted": False, "reason": "several questions wait: give path and key", "waiting": waiting}

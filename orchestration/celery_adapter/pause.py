"""A task paused for a person's answer, and the ``agentloop.resume`` task that continues it.

Pausing records the question with the message that re-sends the paused task
(``Task.signature_from_request``: the same task id, chain, chord and group, as a
Celery retry re-sends it), marks the run ``waiting``, schedules the expiry, and
ends the task with ``Ignore``: no result, so a chord's counter (the redis backend's
``on_chord_part_return``) is not moved and the merge waits. Resuming checks the
answer against the question's schema, settles the wait (one conditional write: a
second resume is refused), and re-sends that message; the task runs again from the
loop's last checkpoint, its question answered, and counts in its chord when it ends.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Task
from celery.exceptions import Ignore

from agentloop.actions.human import InvalidAnswerError, RunPaused, check_answer
from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.orchestration.celery_adapter.deliveries import unmarked_signature
from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.store.waits import ANSWERED, EXPIRED, PENDING, Wait
from agentloop.orchestration.wire import RESUME


def pause_task(task: Task, pause: RunPaused, run_id: str) -> None:
    """Record the wait of ``task`` (paused by ``pause``) and end the task with ``Ignore``."""
    deps = dependencies_of(task.app)
    waits, question = deps.waits, pause.question
    if waits is None:
        raise RuntimeError(f"run {run_id} cannot pause: its run store keeps no questions")
    message = json.loads(json.dumps(dict(task.signature_from_request()), default=str))
    unmarked_signature(message)  # it ran: sent again, it reads its checkpoint (deliveries.py)
    expires_at = None
    if question.expires_in is not None:
        expires_at = datetime.now(UTC) + timedelta(seconds=question.expires_in)
    wait = Wait(run_id=run_id, path=pause.path, question=question, message=message, expires_at=expires_at)
    if waits.record(wait):
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
        if expires_at is not None:
            expiry = {"run_id": run_id, "path": pause.path, "key": question.key, "expire": True}
            task.app.signature(RESUME, kwargs=expiry).apply_async(eta=expires_at)
    waits.mark_run_waiting(run_id)
    raise Ignore()


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
    already answered).
    """
    deps = dependencies_of(self.app)
    run_id, waits = str(run_id), deps.waits
    if waits is None:
        return {"accepted": False, "reason": "this run store keeps no questions"}
    candidates = [
        wait
        for wait in waits.waits(run_id, status=PENDING)
        if (path is None or wait.path == path) and (key is None or wait.key == key)
    ]
    if len(candidates) != 1:
        return _refused(run_id, candidates)
    wait = candidates[0]
    if expire:
        if wait.expires_at is None or wait.expires_at > datetime.now(UTC) + timedelta(seconds=1):
            return {"accepted": False, "reason": "the question has not expired"}
        status, answer = EXPIRED, None
    else:
        try:
            answer = check_answer(wait.question, answer)
        except InvalidAnswerError as wrong:
            return {"accepted": False, "reason": wrong.reason, "wait": wait.describe()}
        status = ANSWERED
    if not waits.settle(run_id, wait.path, wait.key, status=status, answer=answer):
        return {"accepted": False, "reason": "the question was answered already"}
    if not waits.waits(run_id, status=PENDING):
        deps.store.mark_running(run_id)
    if wait.message is not None:
        self.app.signature(wait.message).apply_async()
    return {"accepted": True, "status": status, "wait": wait.describe()}


def _refused(run_id: str, candidates: list[Wait]) -> dict[str, Any]:
    if not candidates:
        return {"accepted": False, "reason": f"run {run_id} waits for no such question"}
    waiting = [{"path": wait.path, "key": wait.key} for wait in candidates]
    return {"accepted": False, "reason": "several questions wait: give path and key", "waiting": waiting}

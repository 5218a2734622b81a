"""``StoreHumanChannel``: a run's questions answered from the wait store, or the task paused."""

from __future__ import annotations

from typing import Any

from agentloop.actions.errors import QuestionExpiredError
from agentloop.actions.human import Question, RunPaused, check_answer
from agentloop.orchestration.store.waits import ANSWERED, EXPIRED, WaitStore


class StoreHumanChannel:
    """The channel of a run on Celery.

    An answered question returns its recorded answer (checked again), an expired one its
    default or :class:`~agentloop.actions.errors.QuestionExpiredError`; any other raises
    :class:`~agentloop.actions.human.RunPaused`, which the task turns into a recorded wait
    (``orchestration/celery_adapter/pause.py``).
    """

    def __init__(self, waits: WaitStore, run_id: str) -> None:
        self.waits, self.run_id = waits, run_id

    async def ask(self, question: Question, *, path: str) -> Any:
        wait = self.waits.get(self.run_id, path, question.key)
        if wait is None or wait.status not in (ANSWERED, EXPIRED):
            raise RunPaused(question, path=path)
        if wait.status == ANSWERED:
            return check_answer(question, wait.answer)
        if question.has_default:
            return question.default
        raise QuestionExpiredError(question, path=path)

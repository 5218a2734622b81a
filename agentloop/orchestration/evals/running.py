"""Running a registered runnable over the cases: in this process, or on Celery as one batch.

:func:`run_inline` runs each case with the :class:`~agentloop.loops.InlineAgentRunner`, at most
``concurrency`` at once, each with its own context from the registration's factory, its own
step cache and its own token meter. :func:`run_on_celery` sends one ``agentloop.batch`` of all the
inputs (:mod:`~agentloop.orchestration.celery_adapter.batches`: chunked, each input a child run
``<batch id>-<index>`` in the run store) and reads the child runs from the run store as they end.

Either way each case ends as a :class:`CaseRun`: its ``status`` as the run store would record it
(``succeeded``, ``degraded``, ``failed``, ``cancelled``, ...; ``unfinished`` when it had not ended
by the timeout), its output, its error (the text scrubbed of the context spec's values and the
model keys), its tokens and, for a run that returned, how it ended (``stopped_by``). A run that
fails is a case's result, never the evaluation's end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentloop.actions.caching import InMemoryStepCache
from agentloop.actions.errors import RunStoppedError
from agentloop.actions.usage import InMemoryUsageMeter
from agentloop.loops.runner import InlineAgentRunner
from agentloop.orchestration.errors import WorkflowFailedError
from agentloop.orchestration.evals.dataset import EvalCase
from agentloop.orchestration.redaction import scrub
from agentloop.orchestration.registry import Registration
from agentloop.orchestration.store import TERMINAL_STATUSES, RunRecord, RunStore
from agentloop.orchestration.wire import BATCH

__all__ = ["UNFINISHED", "CaseRun", "run_inline", "run_on_celery"]

#: The status of a case whose run had not ended when the evaluation stopped waiting.
UNFINISHED = "unfinished"

#: Called once per case that ended, with how many have.
OnDone = Callable[[int], None]


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseRun:
    """How one case's run ended (see the module doc)."""

    status: str
    output: Any = None
    error: Any = None
    run_id: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    #: How a run that returned ended: ``"complete"``, or ``"bound"`` (a loop hit its bound).
    stopped_by: str | None = None


def _error(error: BaseException, secrets: Sequence[str]) -> dict[str, str]:
    return {"type": type(error).__name__, "message": str(scrub(str(error), secrets))}


async def run_inline(
    registration: Registration,
    cases: Sequence[EvalCase],
    *,
    spec: Mapping[str, Any],
    concurrency: int = 4,
    secrets: Sequence[str] = (),
    on_done: OnDone | None = None,
) -> list[CaseRun]:
    """Each case's run in this process (see the module doc), in the cases' order."""
    gate = asyncio.Semaphore(max(1, concurrency))
    done = 0

    async def one(case: EvalCase, index: int) -> CaseRun:
        nonlocal done
        run_id = f"eval-case-{index}"
        async with gate:
            meter = InMemoryUsageMeter()
            try:
                runner = InlineAgentRunner.create(
                    runnable=registration.runnable,
                    context=registration.build_context(spec),
                    cache=InMemoryStepCache(),
                )
                outcome = await runner.request_outcome(input=case.input, run_id=run_id, meter=meter)
                ended = CaseRun(
                    status=outcome.status,
                    output=outcome.result,
                    error=outcome.error,
                    stopped_by=outcome.stopped_by,
                )
            except RunStoppedError as error:
                ended = CaseRun(status=error.status, error=_error(error, secrets))
            except Exception as error:
                ended = CaseRun(status="failed", error=_error(error, secrets))
        done += 1
        if on_done is not None:
            on_done(done)
        return CaseRun(
            status=ended.status,
            output=ended.output,
            error=ended.error,
            input_tokens=meter.usage.input_tokens,
            output_tokens=meter.usage.output_tokens,
            stopped_by=ended.stopped_by,
        )

    return list(await asyncio.gather(*(one(case, index) for index, case in enumerate(cases))))


def run_on_celery(
    app: Any,
    store: RunStore,
    name: str,
    cases: Sequence[EvalCase],
    *,
    spec: Mapping[str, Any],
    batch_id: str,
    timeout: float | None = None,
    poll: float = 0.2,
    on_done: OnDone | None = None,
) -> list[CaseRun]:
    """Each case's run as a child of one ``agentloop.batch`` (see the module doc), in the cases' order.

    Raises :class:`~agentloop.orchestration.errors.WorkflowFailedError` when the batch task itself
    fails (its runnable unknown to the workers, say): then no case ran.
    """
    app.send_task(
        BATCH,
        kwargs={
            "runnable": name,
            "inputs": [case.input for case in cases],
            "context": dict(spec),
            "key": f"eval:{batch_id}",
            "poll_seconds": 1.0,
        },
        task_id=batch_id,
    )
    child_ids = [f"{batch_id}-{index}" for index in range(len(cases))]
    ended: dict[str, RunRecord] = {}
    deadline = None if timeout is None else time.monotonic() + timeout
    batch = app.AsyncResult(batch_id)
    while len(ended) < len(child_ids):
        for child in store.list_runs(limit=len(child_ids), parent_run_id=batch_id):
            if child.id not in ended and child.status in TERMINAL_STATUSES:
                ended[child.id] = child
                if on_done is not None:
                    on_done(len(ended))
        if len(ended) == len(child_ids) or (deadline is not None and time.monotonic() > deadline):
            break
        if batch.failed():
            error = batch.result
            raise WorkflowFailedError(type(error).__name__, str(error), run_id=batch_id)
        time.sleep(poll)
    runs = []
    for child_id in child_ids:
        record = ended.get(child_id)
        if record is None:
            runs.append(
                CaseRun(
                    status=UNFINISHED,
                    run_id=child_id,
                    error={"type": "Unfinished", "message": f"still running after {timeout}s"},
                )
            )
        else:
            runs.append(
                CaseRun(
                    status=record.status,
                    output=record.output,
                    error=record.error,
                    run_id=child_id,
                    input_tokens=record.input_tokens,
                    output_tokens=record.output_tokens,
                    stopped_by=record.stopped_by,
                )
            )
    return runs

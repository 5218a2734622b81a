"""Scoring each case's run with every scorer, into the report's :class:`CaseResult` values.

A run that returned (``succeeded``, or ``degraded``: a fallback answered) is scored; the degraded
one still fails its case (:attr:`CaseResult.passed`). A run that returned nothing (failed, stopped,
unfinished) gets a zero from each scorer with the run's error as the reason. At most ``concurrency``
cases are scored at once (a judge's model calls are the slow part).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from agentloop.orchestration.evals.dataset import EvalCase
from agentloop.orchestration.evals.report import CaseResult
from agentloop.orchestration.evals.running import CaseRun
from agentloop.orchestration.evals.scorers import Scorer
from agentloop.orchestration.evals.scores import EvalScore

__all__ = ["RETURNED", "score_cases"]

#: The statuses of a run that returned an output.
RETURNED = frozenset({"succeeded", "degraded"})


def _no_output(run: CaseRun) -> EvalScore:
    error = run.error if isinstance(run.error, dict) else {}
    why = f"{error.get('type', 'Error')}: {error.get('message', '')}" if error else "no output"
    return EvalScore(value=0.0, passed=False, reason=f"the run {run.status}: {why}")


async def score_cases(
    cases: Sequence[EvalCase],
    runs: Sequence[CaseRun],
    scorers: Sequence[Scorer],
    *,
    concurrency: int = 4,
    on_done: Callable[[int], None] | None = None,
) -> tuple[CaseResult, ...]:
    """Each case with its run and its scores, in the cases' order."""
    gate = asyncio.Semaphore(max(1, concurrency))
    done = 0

    async def one(case: EvalCase, run: CaseRun) -> CaseResult:
        nonlocal done
        async with gate:
            if run.status in RETURNED:
                scores = {scorer.name: await scorer.score(case=case, output=run.output) for scorer in scorers}
            else:
                scores = {scorer.name: _no_output(run) for scorer in scorers}
        done += 1
        if on_done is not None:
            on_done(done)
        return CaseResult(
            id=case.id,
            input=case.input,
            expected=case.expected,
            has_expected=case.has_expected,
            status=run.status,
            output=run.output,
            error=run.error,
            run_id=run.run_id,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            scores=scores,
            stopped_by=run.stopped_by,
            expected_stopped_by=case.stopped_by,
        )

    return tuple(await asyncio.gather(*(one(case, run) for case, run in zip(cases, runs, strict=True))))

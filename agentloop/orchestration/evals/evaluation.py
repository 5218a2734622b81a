"""One evaluation, decided here (the CLI parses and prints): the cases run, each scored, one report.

:func:`evaluate` runs a registered runnable over a dataset's cases (in this process, or on Celery as
one batch when given an app), scores each case's run with every scorer (:func:`score_cases`) and
returns the :class:`~agentloop.orchestration.evals.report.EvalReport`, with the code version and the
model it ran with. :func:`judge_scorer` builds the ``judge`` scorer from the settings.

A run that returned (``succeeded``, or ``degraded``: a fallback answered) is scored; the degraded
one still fails its case (:attr:`CaseResult.passed`). A run that returned nothing (failed, stopped,
unfinished) gets a zero from each scorer with the run's error as the reason. At most ``concurrency``
cases are scored at once (a judge's model calls are the slow part).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any

from agentloop.actions.context_values import context_value
from agentloop.orchestration.errors import EvaluationInputError
from agentloop.orchestration.evals.dataset import Dataset, EvalCase
from agentloop.orchestration.evals.judge import DEFAULT_CRITERIA
from agentloop.orchestration.evals.report import CaseResult, EvalReport
from agentloop.orchestration.evals.running import CaseRun, run_inline, run_on_celery
from agentloop.orchestration.evals.scorers import JudgeScorer, Scorer
from agentloop.orchestration.evals.verdicts import EvalScore
from agentloop.orchestration.evals.version import code_version
from agentloop.orchestration.llm.provider import ModelProvider, describe_processor
from agentloop.orchestration.redaction import context_secrets
from agentloop.orchestration.registry import Registration
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.store import RunStore

__all__ = ["RETURNED", "Progress", "evaluate", "judge_scorer", "score_cases"]

#: What shows how far a phase got: called with the phase's title and its number of cases, it gives a
#: context whose callback is told how many have ended (the CLI's progress bar).
Progress = Callable[[str, int], AbstractContextManager[Callable[[int], None]]]

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


@contextmanager
def _unseen(title: str, total: int) -> Iterator[Callable[[int], None]]:
    yield lambda done: None


def judge_scorer(
    settings: Settings, *, model: str | None, criteria: str | None, threshold: float
) -> Callable[[], JudgeScorer]:
    """The ``judge`` scorer's factory, on the settings' model (or ``model``). Raises
    :class:`EvaluationInputError` on the offline model, which cannot judge."""
    model_settings = settings.model
    if model is not None:
        model_settings = model_settings.model_copy(
            update={"provider": model_settings.provider.model_copy(update={"model_name": model})}
        )
    provider = ModelProvider(model_settings)
    if provider.kind == "offline":
        raise EvaluationInputError(
            "--scorer judge needs a model: set OPENAI_API_KEY or OPENAI_BASE_URL (or ANTHROPIC_API_KEY, "
            "ANTHROPIC_BASE_URL); the offline model cannot judge"
        )
    return lambda: JudgeScorer(processor=provider.processor(), criteria=criteria, threshold=threshold)


def _secrets(settings: Settings, spec: Mapping[str, Any]) -> tuple[str, ...]:
    """What an error's text must not show: the context spec's values and the model keys."""
    keys = (settings.model.openai_api_key, settings.model.provider.anthropic_api_key)
    return (*context_secrets(dict(spec)), *(key.get_secret_value() for key in keys if key is not None))


def _model(settings: Settings, processor: Any = None) -> dict[str, Any]:
    """The model an evaluation ran with: the context's processor in-process, else what the settings
    build (on Celery: what the workers build from the same variables)."""
    source = "context" if processor is not None else "settings"
    provider = ModelProvider(settings.model)
    if processor is None:
        processor = provider.processor()
    name = getattr(processor, "model", None) or getattr(processor, "model_name", None) or provider.model_name
    return {"name": str(name), "description": describe_processor(processor), "from": source}


def evaluate(
    settings: Settings,
    registration: Registration,
    dataset: Dataset,
    scorers: Sequence[Scorer],
    *,
    spec: Mapping[str, Any],
    threshold: float,
    criteria: str | None = None,
    concurrency: int = 4,
    celery: tuple[Any, RunStore] | None = None,
    timeout: float | None = None,
    progress: Progress = _unseen,
) -> EvalReport:
    """``registration`` run over every case of ``dataset`` and scored by each of ``scorers``.

    ``celery`` (an app and its run store) runs the cases on the workers as one batch, waiting at
    most ``timeout`` seconds (cases still going are kept as unfinished); else they run in this
    process, ``concurrency`` at once. Raises :class:`~agentloop.orchestration.errors.ContextSpecError`
    for a context spec the registration refuses and
    :class:`~agentloop.orchestration.errors.WorkflowFailedError` when the batch itself failed.
    """
    created = datetime.now(UTC)
    eval_id = f"eval-{created:%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
    started = time.monotonic()
    cases = dataset.cases
    if celery is not None:
        app, store = celery
        with progress("running on Celery", len(cases)) as advance:
            runs = run_on_celery(
                app,
                store,
                registration.name,
                cases,
                spec=spec,
                batch_id=eval_id,
                timeout=timeout,
                on_done=advance,
            )
        model = _model(settings)
    else:
        processor = context_value(registration.build_context(dict(spec)), "processor")
        with progress("running", len(cases)) as advance:
            runs = asyncio.run(
                run_inline(
                    registration,
                    cases,
                    spec=spec,
                    concurrency=concurrency,
                    secrets=_secrets(settings, spec),
                    on_done=advance,
                )
            )
        model = _model(settings, processor)
    with progress("scoring", len(runs)) as advance:
        results = asyncio.run(score_cases(cases, runs, scorers, concurrency=concurrency, on_done=advance))
    judges = [one for one in scorers if isinstance(one, JudgeScorer)]
    return EvalReport(
        id=eval_id,
        runnable=registration.name,
        dataset={"path": dataset.path, "sha256": dataset.sha256, "cases": len(cases)},
        mode="celery" if celery is not None else "inline",
        created_at=created.isoformat(),
        duration_seconds=round(time.monotonic() - started, 3),
        code=code_version(registration.runnable),
        model=model,
        judge=None
        if not judges
        else {
            "description": describe_processor(judges[0].processor),
            "criteria": criteria or DEFAULT_CRITERIA,
            "input_tokens": judges[0].input_tokens,
            "output_tokens": judges[0].output_tokens,
        },
        scorers=tuple(one.name for one in scorers),
        threshold=threshold,
        cases=results,
    )

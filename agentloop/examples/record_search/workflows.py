"""The record-search agent as Celery workflows (and the demo's main job).

- ``record_search.ask`` — one question: :class:`RecordSearchAgentLoop`,
  input ``{"message": str}``.
- ``record_search.demo`` — :class:`RecordSearchDemo`: a composite fanning the
  questions out to the agent (one branch each, failures collected), then a
  deterministic summary. Input ``{"questions": [str, ...]}`` (default
  :data:`DEMO_QUESTIONS`); output::

      {"summary": "4 of 5 questions found records: 61 records in all ...",
       "question_count", "answered_count", "failed_count", "total_found",
       "per_question": [{"key", "question", "ok", "found_count", "shown_count",
                         "is_truncated", "answered_by", "error"}],
       "answers": [{"key", "question", "ok", "answer": <agent result> | None, "error"}]}

Both build their context in the worker with :func:`build_context` from a JSON
spec ``{"message"?: str, "database_url"?: str}``. Secrets never travel in the
spec: the model key comes from the worker's environment (``OPENAI_API_KEY``),
and a database URL with a password is refused (set ``DATABASE_URL`` on the
worker instead). Importing this module registers both names, so
``AGENTLOOP_IMPORTS=agentloop.examples.record_search.workflows`` is all a worker needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from agentloop import (
    BaseActionStage,
    BaseAgentAction,
    BaseAgentPipeline,
    BaseCompositeAgent,
    Branch,
    BranchResult,
    FailurePolicy,
    register,
)
from agentloop.examples.record_search.context import RecordSearchContext
from agentloop.examples.record_search.generator import shared_context_factory
from agentloop.examples.record_search.loop import RecordSearchAgentLoop
from agentloop.examples.record_search.resources import shared_resources

ASK = "record_search.ask"
DEMO = "record_search.demo"
CONTEXT_SPEC_KEYS = frozenset({"message", "database_url"})
MAX_QUESTIONS = 20

#: The demo's questions: each exercises a different part of the agent.
DEMO_QUESTIONS: tuple[str, ...] = (
    "Which software companies are in Germany?",
    "Show me deals over 50000 in negotiation",
    "Who are the contacts at Acme?",
    "List the won deals",
    "What's the weather like today?",
)


def build_context(spec: Mapping[str, Any]) -> RecordSearchContext:
    """The agent's real context, built in the worker from a JSON context spec: the standard
    context (:func:`agentloop.standard_context`'s processor and run store, this agent's offline
    model) extended with the search service and catalog over the spec's database."""
    unknown = sorted(set(spec) - CONTEXT_SPEC_KEYS)
    if unknown:
        raise ValueError(
            f"unknown context spec keys {unknown}; the spec takes only {sorted(CONTEXT_SPEC_KEYS)} "
            "(keys and other secrets come from the worker's environment)"
        )
    message = spec.get("message")
    if message is not None and not isinstance(message, str):
        raise ValueError("context spec 'message' must be a string")
    url = spec.get("database_url")
    if url is not None:
        if not isinstance(url, str) or not url:
            raise ValueError("context spec 'database_url' must be a non-empty string")
        try:
            has_password = make_url(url).password is not None
        except ArgumentError as error:
            raise ValueError(f"context spec 'database_url' is not a database URL: {error}") from None
        if has_password:
            raise ValueError(
                "a database URL with a password does not belong in a context spec; set DATABASE_URL"
            )
    resources = shared_resources(url)
    return shared_context_factory()().extend(
        RecordSearchContext,
        record_search_service=resources.service,
        tool_store=resources.tool_store,  # the agent's tools, beside its sample records
        searchable_categories=resources.searchable_categories,
        message=message,
    )


def read_questions(input: Any) -> list[str]:
    """The questions of a batch input: ``{"questions": [...]}`` or a list; default :data:`DEMO_QUESTIONS`."""
    questions = input.get("questions") if isinstance(input, Mapping) else input
    if questions is None:
        return list(DEMO_QUESTIONS)
    if not isinstance(questions, list) or not all(isinstance(q, str) and q.strip() for q in questions):
        raise ValueError('a batch input is {"questions": [non-empty strings]}')
    if len(questions) > MAX_QUESTIONS:
        raise ValueError(f"at most {MAX_QUESTIONS} questions per batch, got {len(questions)}")
    return [str(question) for question in questions]


class RecordSearchStage(RecordSearchAgentLoop):
    """The agent as a branch: input ``{"message": str}``; the result also carries the ``question``."""

    def build_result(self, *, state: Any) -> Any:
        return {"question": state["message"], **state["result"]}


class RecordSearchBatch(BaseCompositeAgent):
    """One :class:`RecordSearchStage` per question, concurrently; a failing question is collected."""

    branch_runnables = (RecordSearchStage,)
    failure_policy = FailurePolicy.COLLECT
    max_concurrency = 4

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=RecordSearchStage, input={"message": question}, key=f"q{index}")
            for index, question in enumerate(read_questions(input), start=1)
        ]

    def merge_results(self, *, results: Sequence[BranchResult], input: Any) -> Any:
        questions = read_questions(input)
        return {
            "answers": [
                {
                    "key": result.key,
                    "question": question,
                    "ok": result.ok,
                    "answer": result.output if result.ok else None,
                    "error": dict(result.error) if result.error is not None else None,
                }
                for question, result in zip(questions, results, strict=True)
            ]
        }


class SummarizeAnswersAction(BaseAgentAction):
    """No model: counts per question and in all, and one sentence saying them."""

    name = "summarize_answers"
    description = "Summarise a batch of record-search answers"

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        answers = list(arguments.get("answers") or [])
        per_question = [_question_summary(entry) for entry in answers]
        answered = [entry for entry in per_question if entry["ok"]]
        with_records = [entry for entry in answered if entry["found_count"] > 0]
        total = sum(int(entry["found_count"]) for entry in answered)
        failed = len(per_question) - len(answered)
        summary = (
            f"{len(with_records)} of {len(per_question)} questions found records: {total} records in all"
        )
        truncated = sum(1 for entry in answered if entry["is_truncated"])
        if truncated:
            summary += f"; {truncated} list(s) cut at the limit"
        if failed:
            summary += f"; {failed} question(s) failed"
        return {
            "summary": summary + ".",
            "question_count": len(per_question),
            "answered_count": len(answered),
            "failed_count": failed,
            "total_found": total,
            "per_question": per_question,
            "answers": answers,
        }


def _question_summary(entry: Mapping[str, Any]) -> dict[str, Any]:
    answer = entry.get("answer") if entry.get("ok") else None
    answer = answer if isinstance(answer, Mapping) else {}
    error = entry.get("error")
    return {
        "key": entry.get("key"),
        "question": entry.get("question"),
        "ok": bool(entry.get("ok")),
        "found_count": int(answer.get("found_count", 0)),
        "shown_count": len(answer.get("records", ())),
        "is_truncated": bool(answer.get("is_truncated", False)),
        "answered_by": answer.get("answered_by"),
        "error": dict(error) if isinstance(error, Mapping) else None,
    }


class SummarizeAnswers(BaseActionStage):
    """The summary stage: :class:`SummarizeAnswersAction` over the batch's output."""

    action = SummarizeAnswersAction


class RecordSearchDemo(BaseAgentPipeline):
    """The demo workflow: :class:`RecordSearchBatch` -> :class:`SummarizeAnswers`."""

    stages = (RecordSearchBatch, SummarizeAnswers)


register(ASK, RecordSearchAgentLoop, context_factory=build_context)
register(DEMO, RecordSearchDemo, context_factory=build_context)

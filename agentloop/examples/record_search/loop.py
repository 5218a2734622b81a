"""``RecordSearchAgentLoop``: the procedure plan -> execute -> compose, in code.

Input (JSON): ``{"message": str}``. Result (JSON)::

    {"message": str,                      # the answer to the user
     "records": [{"category", "id", "label", "fields": {...}}],
     "is_truncated": bool,                # more matched than are listed
     "found_count": int,                  # how many matched in all
     "answered_by": str}                  # the model behind the processor

Everything else — processor, ``record_search_service``,
``searchable_categories``, tool store and tool ids, ``notify_progress`` —
comes through ``context`` (see :class:`~agentloop.examples.record_search.context.RecordSearchContext`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentloop import (
    AgentActionRegistry,
    ProceduralAgentLoop,
    ProgressCallback,
    ProgressStatus,
    context_value,
)
from agentloop.examples.record_search.actions import (
    ComposeAnswerAction,
    ExecuteSearchPlanAction,
    PlanSearchAction,
)
from agentloop.examples.record_search.actions.base import searchable_categories
from agentloop.examples.record_search.actions.plan_search import MODEL_UNAVAILABLE
from agentloop.examples.record_search.catalog import SearchableCategory, find_category

NO_PLAN_MESSAGE = "I could not turn that into a record search. Could you rephrase what you are looking for?"
#: The answer when the model could not be asked for a plan (the run ends ``degraded``).
MODEL_UNAVAILABLE_MESSAGE = (
    "The language model is unavailable right now, so I could not search the records. Please try again later."
)
#: How many records the composer sees as examples.
SAMPLE_RECORDS = 5


def model_name(processor: Any) -> str:
    """A readable name for the model behind ``processor``."""
    for attribute in ("model_name", "model"):
        value = getattr(processor, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(processor).__name__ if processor is not None else "none"


class RecordSearchAgentLoop(ProceduralAgentLoop):
    """Plan the search (model), execute it (code), compose the answer (model).

    Usually one iteration. When no valid plan comes back the answer is the
    deterministic :data:`NO_PLAN_MESSAGE` with no records; when the model could
    not be asked at all (errors after the processor's retries, malformed tool
    calls) it is :data:`MODEL_UNAVAILABLE_MESSAGE`, and the run ends ``degraded``
    (a model failure in the compose step keeps the records, with a note). Inside the
    iteration, ``context.notify_progress`` (when set) hears each phase:
    ``plan``, ``execute``, ``compose``, each ``started`` then ``completed``
    (or ``failed`` for a plan that did not come back). The same phases also
    reach the run's ``on_progress`` as ``progress`` events (``data.step_status``
    says started/completed/failed), so a Celery task's state and a live display
    show which step each question is at.
    """

    max_iterations = 4
    _on_progress: ProgressCallback | None = None
    _iteration = 0

    async def run(self, *, input: Any, on_progress: ProgressCallback | None = None) -> Any:
        self._on_progress = on_progress
        return await super().run(input=input, on_progress=on_progress)

    async def notify_progress(self, *, phase: str, status: str, message: str = "", **data: Any) -> None:
        """Tell ``context.notify_progress`` (when set) and the run's ``on_progress`` about a phase."""
        await super().notify_progress(phase=phase, status=status, message=message, **data)
        if self._on_progress is None:
            return
        event = self.make_event(
            scope=self._scope,
            iteration=self._iteration,
            max_iterations=self.max_iterations,
            phase=phase,
            status=ProgressStatus.PROGRESS,
            message=message or f"{phase} {status}",
            data={"step_status": status, **data},
        )
        await self.emit_progress(event=event, on_progress=self._on_progress)

    @property
    def registry(self) -> AgentActionRegistry:
        return AgentActionRegistry.create(
            actions=[
                PlanSearchAction.create(),
                ExecuteSearchPlanAction.create(),
                ComposeAnswerAction.create(),
            ]
        )

    @property
    def searchable_categories(self) -> tuple[SearchableCategory, ...]:
        return searchable_categories(arguments={}, context=self.context)

    def read_message(self, *, input: Any) -> str:
        """The user's message from ``{"message": str}`` (or a bare string, or ``context.message``)."""
        if isinstance(input, str):
            return input
        if input is None or (isinstance(input, Mapping) and input.get("message") is None):
            fallback = context_value(self.context, "message", "")
            return fallback if isinstance(fallback, str) else ""
        if isinstance(input, Mapping) and isinstance(input["message"], str):
            return str(input["message"])
        raise ValueError('the record-search input must be {"message": str}')

    def create_initial_state(self, *, input: Any) -> Any:
        return {"message": self.read_message(input=input), "result": None}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        self._iteration = iteration
        message: str = state["message"]
        categories = self.searchable_categories

        await self.notify_progress(phase="plan", status="started", message="planning the search")
        plan = (
            await self.perform_action(
                name="plan_search", arguments={"message": message, "searchable_categories": categories}
            )
            if message.strip()
            else None
        )
        if plan is not None and MODEL_UNAVAILABLE in plan:
            await self.notify_progress(phase="plan", status="failed", message="the model is unavailable")
            return {**state, "result": self.build_no_plan_result(message=MODEL_UNAVAILABLE_MESSAGE)}
        if plan is None or not plan["steps"]:
            await self.notify_progress(phase="plan", status="failed", message="no usable search plan")
            return {**state, "result": self.build_no_plan_result()}
        await self.notify_progress(
            phase="plan", status="completed", message=f"{len(plan['steps'])} step(s)", plan=plan
        )

        await self.notify_progress(phase="execute", status="started", message="searching the records")
        executed = await self.perform_action(
            name="execute_search_plan", arguments={"plan": plan, "searchable_categories": categories}
        )
        await self.notify_progress(
            phase="execute",
            status="completed",
            message=f"{executed['found_count']} found",
            found_count=executed["found_count"],
            is_truncated=executed["is_truncated"],
        )

        await self.notify_progress(phase="compose", status="started", message="writing the answer")
        summary = self.build_result_summary(executed=executed, categories=categories)
        answer = await self.perform_action(
            name="compose_answer", arguments={"message": message, "result_summary": summary}
        )
        await self.notify_progress(phase="compose", status="completed", message="answer ready")

        return {
            **state,
            "result": {
                "message": answer["message"],
                "records": executed["records"],
                "is_truncated": executed["is_truncated"],
                "found_count": executed["found_count"],
                "answered_by": self.answered_by,
            },
        }

    def build_result_summary(
        self, *, executed: Mapping[str, Any], categories: tuple[SearchableCategory, ...]
    ) -> dict[str, Any]:
        """What the composer sees: counts, the category, and a few sample records."""
        category = find_category(categories, executed["category_id"])
        return {
            "found_count": executed["found_count"],
            "shown_count": executed["shown_count"],
            "is_truncated": executed["is_truncated"],
            "category_id": executed["category_id"],
            "category_name": category.name if category else executed["category_id"],
            "singular_name": category.singular_name if category else "record",
            "sample_records": [
                {"label": record["label"], "fields": record["fields"]}
                for record in executed["records"][:SAMPLE_RECORDS]
            ],
        }

    def build_no_plan_result(self, *, message: str = NO_PLAN_MESSAGE) -> dict[str, Any]:
        return {
            "message": message,
            "records": [],
            "is_truncated": False,
            "found_count": 0,
            "answered_by": self.answered_by,
        }

    @property
    def answered_by(self) -> str:
        return model_name(context_value(self.context, "processor"))

"""``PydanticAIAgent``: an existing pydantic-ai ``Agent`` as a runnable, and ``pydantic_ai_runnable``,
which makes one.

The agent's own code is not changed: each run of it gets the :class:`DurableSteps` capability at run
time (``agent.run(..., capabilities=[...])``), so the same agent runs as it always did elsewhere.
Registered like any runnable (``register("support", pydantic_ai_runnable(agent))``), it is started
by name over the wire, runs as a stage of a pipeline or a branch of a composite, inline or on a
worker, with the same result.

The input is the prompt (a string) or ``{"prompt": ..., "deps": ...}``; the result is the agent's
output as JSON (a pydantic model's ``model_dump(mode="json")``). A tool that needs approval
(``requires_approval=True``) is asked as the run's question (``ask_human``, an ``approval``): inline
the runner's ``on_question`` answers; on Celery the task pauses, the worker is freed, and the answer
(``agentloop resume``, ``POST /runs/{id}/resume``) sends it on: the agent runs again, every finished
step answered from the journal, and goes on with the approval.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.agent import AbstractAgent
from pydantic_core import to_jsonable_python

from agentloop.actions.context_values import context_value
from agentloop.actions.human import Question, QuestionKind, ask_human
from agentloop.loops.contract import ProgressCallback, RunnableBase
from agentloop.loops.progress import ProgressStatus
from agentloop.loops.scope import ensure_scope
from agentloop.orchestration.errors import ExternalToolCallsError
from agentloop.orchestration.integrations.pydantic_ai.deltas import delta_handler
from agentloop.orchestration.integrations.pydantic_ai.journal import StepJournal
from agentloop.orchestration.integrations.pydantic_ai.steps import DurableSteps
from agentloop.orchestration.llm.limits.processor import RateLimiter
from agentloop.orchestration.llm.stream_deltas import DEFAULT_STREAM_INTERVAL

__all__ = ["PydanticAIAgent", "pydantic_ai_runnable"]


class PydanticAIAgent(RunnableBase):
    """A pydantic-ai agent as a runnable (module doc). Subclass it with ``agent`` set, or use
    :func:`pydantic_ai_runnable`; every hook below may be overridden."""

    #: The wrapped agent.
    agent: ClassVar[AbstractAgent[Any, Any]]
    #: Whether the agent's model requests are streamed, their text and tool arguments reported as
    #: ``delta`` progress events (throttled to one per ``stream_interval``).
    stream: ClassVar[bool] = False
    stream_interval: ClassVar[timedelta] = DEFAULT_STREAM_INTERVAL

    def build_prompt(self, *, input: Any) -> str | None:
        """The user prompt: the input when it is a string, else its ``"prompt"``."""
        if isinstance(input, str):
            return input
        if isinstance(input, Mapping) and isinstance(input.get("prompt"), str):
            return str(input["prompt"])
        raise ValueError('a pydantic-ai agent takes a prompt string or {"prompt": "...", "deps": ...}')

    def build_deps(self, *, input: Any) -> Any:
        """The run's ``deps``: the input's ``"deps"`` (none by default)."""
        return input.get("deps") if isinstance(input, Mapping) else None

    def run_options(self, *, input: Any) -> dict[str, Any]:
        """More keywords for ``agent.run`` (``model``, ``model_settings``, ``usage_limits``...)."""
        return {}

    def build_result(self, *, output: Any) -> Any:
        """The run's result: the agent's output as JSON."""
        if isinstance(output, BaseModel):
            return output.model_dump(mode="json")
        return to_jsonable_python(output)

    def rate_limiter(self) -> RateLimiter | None:
        """The provider's rate limit the workers share: the context's ``rate_limiter``, or the
        limiter of its rate-limited ``processor`` (``standard_context`` gives one when configured)."""
        limiter = context_value(self.context, "rate_limiter")
        if limiter is None:
            limiter = getattr(context_value(self.context, "processor"), "limiter", None)
        return limiter if isinstance(limiter, RateLimiter) else None

    def approval_question(self, *, tool_name: str, args: Any, tool_call_id: str) -> Question:
        """The question a tool call that needs approval becomes (its key: the call's id)."""
        shown = args if isinstance(args, str) else json.dumps(args, sort_keys=True, default=str)
        return Question(
            prompt=f"Allow the agent to call {tool_name}({shown})?",
            kind=QuestionKind.APPROVAL,
            key=f"approve/{tool_call_id}",
        )

    def _output_type(self) -> Any:
        output_type = self.agent.output_type
        if isinstance(output_type, Sequence) and not isinstance(output_type, str):
            kinds = list(output_type)
        else:
            kinds = [output_type]
        return kinds if DeferredToolRequests in kinds else [*kinds, DeferredToolRequests]

    async def run(self, *, input: Any, on_progress: ProgressCallback | None = None) -> Any:
        prompt, deps, options = (
            self.build_prompt(input=input),
            self.build_deps(input=input),
            self.run_options(input=input),
        )
        with ensure_scope() as scope:

            async def report(phase: str, status: str, message: str, data: dict[str, Any]) -> None:
                event = self.make_event(
                    scope=scope,
                    iteration=journal.current_number("model"),
                    max_iterations=0,
                    phase=phase,
                    status=ProgressStatus.PROGRESS,
                    message=message,
                    data={"step_status": status, **data},
                )
                await self.emit_progress(event=event, on_progress=on_progress)

            journal = StepJournal.open(scope)
            steps = DurableSteps(journal=journal, scope=scope, report=report, limiter=self.rate_limiter())
            if self.stream:
                handler = delta_handler(
                    action=self.name, replaying=lambda: steps.replaying, interval=self.stream_interval
                )
                options = {"event_stream_handler": handler, **options}
            history: Any = None
            deferred: DeferredToolResults | None = None
            while True:
                result = await self.agent.run(
                    prompt if history is None else None,
                    output_type=self._output_type(),
                    message_history=history,
                    deferred_tool_results=deferred,
                    deps=deps,
                    capabilities=[steps],
                    **options,
                )
                output = result.output
                if not isinstance(output, DeferredToolRequests):
                    return self.build_result(output=output)
                if output.calls:
                    names = ", ".join(call.tool_name for call in output.calls)
                    raise ExternalToolCallsError(f"the agent deferred tool calls to run outside it: {names}")
                approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
                for call in output.approvals:
                    question = self.approval_question(
                        tool_name=call.tool_name, args=call.args, tool_call_id=call.tool_call_id
                    )
                    approvals[call.tool_call_id] = bool(await ask_human(question))
                history, deferred = result.all_messages(), DeferredToolResults(approvals=approvals)


def pydantic_ai_runnable(
    agent: AbstractAgent[Any, Any], *, name: str | None = None, stream: bool = False
) -> type[PydanticAIAgent]:
    """A :class:`PydanticAIAgent` class for ``agent``, named ``name`` (default: the agent's name) in
    progress events, its requests streamed when ``stream``; register it like any runnable."""
    runnable_name = name or agent.name or "pydantic_ai_agent"
    attributes = {"agent": agent, "runnable_name": runnable_name, "stream": stream, "__module__": __name__}
    return type(f"PydanticAIAgent_{runnable_name}", (PydanticAIAgent,), attributes)

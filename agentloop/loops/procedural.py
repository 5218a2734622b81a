"""``ProceduralAgentLoop``: the procedure is code, written in ``advance_state``.

Defaults fit the usual shape: the state is ``{"result": None}``, the loop is
complete once ``result`` is set, and the result is ``state["result"]``. A
subclass usually writes only :meth:`advance_state` (and its ``registry``).
"""

from __future__ import annotations

from typing import Any

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.context_values import context_value
from agentloop.loops.base import BaseAgentLoop


class ProceduralAgentLoop(BaseAgentLoop):
    """A loop whose steps are code, in :meth:`advance_state`; done once ``state["result"]`` is set."""

    max_iterations = 4

    def create_initial_state(self, *, input: Any) -> Any:
        return {"result": None}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return isinstance(state, dict) and state.get("result") is not None

    def build_result(self, *, state: Any) -> Any:
        return state.get("result") if isinstance(state, dict) else state

    async def notify_progress(self, *, phase: str, status: str, message: str = "", **data: Any) -> None:
        """Report a step inside the procedure through ``context.notify_progress``, when set."""
        notify = context_value(self.context, "notify_progress")
        if notify is not None:
            await maybe_await(notify(phase=phase, status=status, message=message, **data))

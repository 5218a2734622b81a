"""``StepJournal``: the results of a pydantic-ai agent run's finished steps, kept where the run's
loops keep their checkpoints.

Each model request and each tool call the agent finished is one entry, under a key the run
reaches again in the same order when it runs again (``model/3``, ``tool/3/call_ab12``). The
journal is the runnable's checkpoint in the run scope's :class:`~agentloop.loops.scope.Checkpointer`
(``iteration``: how many steps it holds; ``state``: ``{"pydantic_ai_steps": {key: JSON}}``), written
after every step, so a task redelivered after its worker died, or sent again once a person answered,
finds every finished step's result and repeats none of them. Without a checkpointer (a plain
in-process run) it lives in memory for the run.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from agentloop.actions.awaiting import maybe_await
from agentloop.loops.scope import RunScope

__all__ = ["STATE_KEY", "StepJournal"]

#: The key of the checkpoint's state under which the steps are kept.
STATE_KEY = "pydantic_ai_steps"


class StepJournal:
    """The finished steps of one agent run at one workflow path (module doc)."""

    def __init__(self, *, scope: RunScope | None = None, steps: Mapping[str, Any] | None = None) -> None:
        self._scope = scope
        self._steps: dict[str, Any] = dict(steps or {})
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}
        #: Steps answered from the journal and steps run, in this take of the run.
        self.replayed = 0
        self.executed = 0

    @classmethod
    def open(cls, scope: RunScope | None) -> StepJournal:
        """The journal of the runnable running in ``scope``: its checkpoint's steps, or none yet."""
        if scope is None or scope.checkpointer is None:
            return cls(scope=scope)
        checkpoint = scope.checkpointer.load(path=scope.path)
        steps: Mapping[str, Any] = {}
        if checkpoint is not None:
            state = checkpoint[1]
            if isinstance(state, Mapping) and isinstance(state.get(STATE_KEY), Mapping):
                steps = state[STATE_KEY]
        return cls(scope=scope, steps=steps)

    @property
    def steps(self) -> dict[str, Any]:
        """A copy of the recorded steps, by key."""
        with self._lock:
            return dict(self._steps)

    def next_number(self, kind: str) -> int:
        """The next number (from 1) of a step of ``kind`` in this take of the run."""
        with self._lock:
            number = self._counters.get(kind, 0) + 1
            self._counters[kind] = number
            return number

    def current_number(self, kind: str) -> int:
        """The number of the last step of ``kind`` taken so far (0 before the first)."""
        with self._lock:
            return self._counters.get(kind, 0)

    def has(self, key: str) -> bool:
        with self._lock:
            return key in self._steps

    def get(self, key: str) -> Any:
        """The recorded result of step ``key`` (``KeyError`` when it has none)."""
        with self._lock:
            value = self._steps[key]
        self.replayed += 1
        return value

    async def put(self, key: str, value: Any) -> None:
        """Record step ``key``'s JSON result and write the journal to the checkpointer."""
        with self._lock:
            self._steps[key] = value
            snapshot = dict(self._steps)
        self.executed += 1
        scope = self._scope
        if scope is None or scope.checkpointer is None:
            return
        state = {STATE_KEY: snapshot}
        # every step is written, whatever the checkpointer's pace for loop iterations
        save = getattr(scope.checkpointer, "save_now", scope.checkpointer.save)
        await maybe_await(save(path=scope.path, iteration=len(snapshot), state=state))

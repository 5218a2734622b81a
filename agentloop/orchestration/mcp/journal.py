"""A completed MCP call kept with the branch's checkpoints, so a loop resumed after the call (a
worker killed before the loop's end) gets the same outcome back without calling the tool again.

A call is placed by the loop iteration it is made in and its order among that iteration's MCP
calls (:func:`~agentloop.actions.recording.call_place`), and kept in the run's checkpoint store
under ``<loop path>#mcp/<iteration>/<seq>`` with the tool's name and a hash of the arguments: a
resumed iteration that makes the same call at the same place is answered from it; any other call
there is made afresh (and kept in its place). An outcome the server did not give (it was away) is
not kept: the call is tried again. On Celery the entry is written at once, whatever the
deployment's ``AGENTLOOP_CHECKPOINT_SECONDS``; without a checkpointer (in-process) nothing is kept.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.recording import MCP_CALL, call_place
from agentloop.loops.scope import Checkpointer, current_scope
from agentloop.orchestration.store.seams import StoreCheckpointer


def arguments_hash(tool: str, arguments: Any) -> str:
    text = json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class CallJournal:
    """Where one call's outcome is kept (module doc)."""

    checkpointer: Checkpointer | None
    run_id: str
    path: str
    key: str

    @classmethod
    def here(cls, server: str, tool: str, arguments: Any) -> CallJournal:
        """The journal place of the next call made here (taken for every call, kept or not)."""
        iteration, seq = call_place(MCP_CALL)
        scope = current_scope()
        base = "" if scope is None else scope.path
        return cls(
            checkpointer=None if scope is None else scope.checkpointer,
            run_id="" if scope is None else scope.run_id,
            path=f"{base}#mcp/{iteration}/{seq}",
            key=arguments_hash(f"{server}/{tool}", arguments),
        )

    def load(self) -> dict[str, Any] | None:
        """The outcome kept for this very call, or ``None``."""
        if self.checkpointer is None:
            return None
        found = self.checkpointer.load(path=self.path)
        if found is None or not isinstance(found[1], dict) or found[1].get("key") != self.key:
            return None
        outcome = found[1].get("outcome")
        return outcome if isinstance(outcome, dict) else None

    async def save(self, outcome: dict[str, Any]) -> None:
        if self.checkpointer is None:
            return
        state = {"key": self.key, "outcome": outcome}
        if isinstance(self.checkpointer, StoreCheckpointer):  # now, not after the save interval
            self.checkpointer.store.save_checkpoint(self.run_id, self.path, 0, state)
            return
        await maybe_await(self.checkpointer.save(path=self.path, iteration=0, state=state))

"""Workflows of the pack gate's test (imported by its worker process): ``gate.held``, a loop whose
coroutine step waits until the file its context names exists (a packed batch's runs hold their
packs until the test lets them go), and ``gate.quick``, a loop of one step that ends at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.registry import register


@register("gate.held")
class Held(BaseAgentLoop):
    """Waits for the file ``context["release"]``, then ends with its input."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input, "done": False}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        release = Path(str(self.context["release"]))
        while not await asyncio.to_thread(release.exists):  # noqa: ASYNC110 (another process writes it)
            await asyncio.sleep(0.02)
        return {**state, "done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return state["input"]


@register("gate.quick")
class Quick(BaseAgentLoop):
    """One coroutine step: its input back."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        return state

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return True

    def build_result(self, *, state: Any) -> Any:
        return state["input"]

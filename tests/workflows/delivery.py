"""Workflows of the delivery tests (imported by their workers too): the hook that keeps a copy of
every ``agentloop.run`` and ``agentloop.pack`` message the worker publishes, so a test can send
each again, unflagged, as a producer's retry would; and a loop that kills its process once a test
says so (``tests/integration/test_dead_letters.py``)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from celery import signals

from agentloop.orchestration.registry import register
from agentloop.orchestration.wire import PACK, RUN
from agentloop.pipelines import BaseCompositeAgent, Branch
from workflows.durable import SlowCount, TalliedCount

#: The file the worker appends each published run or pack message to (one JSON object a line).
CAPTURE = "AGENTLOOP_TEST_CAPTURE"


class TalliedFan(BaseCompositeAgent):
    """One :class:`TalliedCount` to 3 per item of the input; its results in order."""

    branch_runnables = (TalliedCount,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=TalliedCount, input={"id": key, "goal": 3}, key=key) for key in input]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


class PackedTalliedFan(TalliedFan):
    """:class:`TalliedFan` with its loops packed 4 to a task."""

    pack_size = 4


class KillsItsProcessWhenTold(SlowCount):
    """Waits for the file its context names (``go``), then kills its process, on every delivery:
    a test cuts the run store first, so the delivery that follows finds no store."""

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        go = Path(self.context["go"])
        deadline = time.monotonic() + 120
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
        return state


register("delivery.kills_when_told", KillsItsProcessWhenTold)
register("duplicate.fan", TalliedFan)
register("duplicate.packed_fan", PackedTalliedFan)


@signals.before_task_publish.connect
def _keep_a_copy(
    body: Any = None,
    exchange: str = "",
    routing_key: str = "",
    headers: dict[str, Any] | None = None,
    properties: dict[str, Any] | None = None,
    **_: Any,
) -> None:
    path = os.environ.get(CAPTURE)
    if not path or (headers or {}).get("task") not in (RUN, PACK):
        return
    kept = {key: value for key, value in (properties or {}).items() if key in ("correlation_id", "reply_to")}
    message = {"body": body, "exchange": exchange, "routing_key": routing_key, "headers": headers}
    with open(path, "a") as handle:
        handle.write(json.dumps({**message, "properties": kept}) + "\n")

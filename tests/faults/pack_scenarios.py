"""Faults under packed branches (``agentloop.pack``, ``docs/how-to/packing.md``): the worker
SIGKILLed mid-pack, a pool process killed mid-pack, Redis restarted under packs.

Each launches composites of packed loops whose every iteration is one model call asking
``[packed:<tag>:<iteration>]`` of the rig's model server, which records each call. Just before the
strike the scenario reads each branch's record in the run store: a branch that had finished, and
every iteration before a branch's checkpoint, is then recorded for good. After it, every run
must complete with each branch's count of calls, and the model server must have seen no call of
a finished branch and no second call of an iteration before its branch's checkpoint: every
branch resumed from its own checkpoint, none was run over; and every branch's ``start`` event
must be stored (a checkpoint writes the events before it: none is lost with the worker).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable

from .chaos_model import PACKED_MARKER
from .rig import SHORT, FaultRig, WorkerProfile
from .tally import Outcome, ScenarioResult, settle
from .workload import ScenarioFn, Size

PACKED = "parity.packed_model_calls"
#: Model calls per branch (0.2 s each: a branch takes about a second).
CALLS = 5
#: A pack's time limit covers all its branches, and its first task in a pool process builds the
#: model client (the SDK's import: seconds on a busy host): limits above that, and a visibility
#: timeout above them, so a killed worker's packs come back within half a minute.
PACKED_PROFILE = WorkerProfile(
    name="packed",
    env={
        **SHORT.env,
        "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "20",
        "AGENTLOOP_TASK_TIME_LIMIT": "22",
        "AGENTLOOP_VISIBILITY_TIMEOUT": "25",
    },
)
_CALL = re.compile(re.escape(PACKED_MARKER) + r"([^:\]]+)/(\d+):(\d+)\]")


def _calls(rig: FaultRig, since: int = 0) -> Counter[tuple[str, int, int]]:
    """The calls the model server saw (after the first ``since``): ``(tag, branch, iteration)``."""
    seen: Counter[tuple[str, int, int]] = Counter()
    for request in list(rig.model.requests)[since:]:
        for tag, branch, iteration in _CALL.findall(json.dumps(request.body)):
            seen[(tag, int(branch), int(iteration))] += 1
    return seen


def _records(rig: FaultRig, runs: dict[str, str], width: int) -> dict[tuple[str, int], tuple[bool, int]]:
    """Per ``(tag, branch)``: whether it had finished, and its checkpoint's iteration (0: none)."""
    found = {}
    for run_id, tag in runs.items():
        for branch in range(width):
            finished, _, checkpoint = rig.store.loop_record(run_id, f"branch/{branch}")
            found[(tag, branch)] = (finished, checkpoint[0] if checkpoint else 0)
    return found


def packed(strike_name: str, strike: Callable[[FaultRig], None]) -> ScenarioFn:
    """The scenario: packed runs in flight, ``strike`` mid-pack, then the checks of the module doc."""

    def run(rig: FaultRig, size: Size) -> ScenarioResult:
        result = ScenarioResult(name=f"packed: {strike_name}")
        rig.use_profile(PACKED_PROFILE)
        width = 16 if size.quick else 32
        runs: dict[str, str] = {}
        for _ in range(2 if size.quick else 4):
            tag = uuid.uuid4().hex[:12]
            runs[rig.launch(PACKED, {"tag": tag, "width": width, "calls": CALLS})] = tag
        # mid-pack: the pool's packs have made calls, and are not done (a pack of 8 makes 40)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(_calls(rig).values()) < 16:
            time.sleep(0.05)
        if sum(_calls(rig).values()) < 16:
            result.problems.append("the packed runs had not made 16 calls 60 s after launch")
        before, since = _records(rig, runs, width), len(rig.model.requests)
        strike(rig)
        checks = settle(
            rig.store, rig.app, {run_id: f"{PACKED}#{tag}" for run_id, tag in runs.items()}, bound=size.bound
        )
        result.runs = checks
        result.expect(
            checks.values(), [Outcome.COMPLETED], "each packed branch resumes from its own checkpoint"
        )
        for run_id in runs:
            record = rig.store.get_run(run_id)
            if record is not None and record.status == "succeeded" and record.output != [CALLS] * width:
                result.problems.append(f"run {run_id[:8]} returned {record.output!r}")
        after = _calls(rig, since)
        for (tag, branch), (finished, checkpoint) in before.items():
            again = {iteration: n for (t, b, iteration), n in after.items() if (t, b) == (tag, branch)}
            if finished and again:
                result.problems.append(
                    f"branch {tag}/{branch} had finished, and called the model again: {again}"
                )
            repeated = sorted(iteration for iteration in again if iteration < checkpoint)
            if repeated:
                result.problems.append(
                    f"branch {tag}/{branch} repeated calls {repeated} from before its checkpoint "
                    f"({checkpoint})"
                )
        for run_id, tag in runs.items():  # events up to a checkpoint are stored with it (pack_writes.py)
            started = {event["path"] for _, event in rig.store.events(run_id, phase="start")}
            lost = [branch for branch in range(width) if f"branch/{branch}" not in started]
            if lost:
                result.problems.append(f"run {tag}: no stored start event for branches {lost[:5]}")
        missing = [
            (tag, branch, iteration)
            for tag in runs.values()
            for branch in range(width)
            for iteration in range(CALLS)
            if _calls(rig)[(tag, branch, iteration)] == 0
        ]
        if missing:
            result.problems.append(f"{len(missing)} iterations made no model call, e.g. {missing[:3]}")
        return result

    return run


def _kill_worker(rig: FaultRig) -> None:
    assert rig.worker is not None
    rig.worker.kill(signal.SIGKILL)
    rig.worker.wait(10)
    rig.start_worker(PACKED_PROFILE)


def _kill_pool_children(rig: FaultRig) -> None:
    for child in rig.pool_children():
        os.kill(child, signal.SIGKILL)


def _restart_redis(rig: FaultRig) -> None:
    rig.redis_server.restart()


packed_worker_sigkill = packed("worker SIGKILLed mid-pack", _kill_worker)
packed_pool_child_killed = packed("pool processes killed mid-pack", _kill_pool_children)
packed_redis_restarted = packed("Redis restarted under packs", _restart_redis)

"""A provider rate limit and a run's token budget, shared by two real worker processes.

Both workers (prefork, concurrency 1 each) consume one private Redis broker and
write one SQLite run store; the model is a local OpenAI-protocol server that
records every request (arrival time, and the stamp the workflow adds: the
worker's pid and parent pid, and the rate-limit window the call was counted in).
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from typing import Any

import pytest
from limits_support import ModelCall, RecordingModel, TwoWorkers

from agentloop.orchestration.client import CeleryAgentRunner, RunHandle
from agentloop.orchestration.errors import WorkflowFailedError

pytestmark = pytest.mark.integration


def launch(
    two_workers: TwoWorkers,
    spec: dict[str, Any],
    input: Any,
    token_budget: int | None = None,
    runnable: str = "limits.model_fan",
) -> RunHandle:
    runner = CeleryAgentRunner.create(
        runnable=runnable, context=spec, app=two_workers.app, store=two_workers.store
    )
    run_id = uuid.uuid4().hex
    return runner.request_sync(input=input, run_id=run_id, token_budget=token_budget)


def worker_pids(two_workers: TwoWorkers) -> set[int]:
    return {worker.pid for worker in two_workers.workers}


def test_two_workers_never_exceed_the_shared_requests_per_window(
    two_workers: TwoWorkers, model_server: tuple[Any, RecordingModel]
) -> None:
    server, recorder = model_server
    recorder.reset()
    limit, window, branches, calls = 3, 0.5, 4, 4
    spec = {
        "base_url": server.base_url,
        "env": {
            "REDIS_URL": two_workers.redis_url,
            "AGENTLOOP_MODEL_RPM": str(limit),
            "AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS": str(window),
            "AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS": "30",
            "AGENTLOOP_MODEL_LIMIT_NAME": f"workers-{uuid.uuid4().hex[:8]}",
        },
    }

    results = launch(two_workers, spec, {"branches": branches, "calls": calls}).wait_sync(timeout=60)

    assert [r["ok"] for r in results] == [True] * branches
    assert [r["output"]["answers"] for r in results] == [calls] * branches
    seen: list[ModelCall] = recorder.snapshot()
    assert len(seen) == branches * calls
    stamps = [call.stamp or {} for call in seen]
    assert all(stamp.get("enforced") is True for stamp in stamps), stamps
    # the limit: no window granted more than `limit` slots, across both workers
    per_window = Counter(int(stamp["window"]) for stamp in stamps)
    assert max(per_window.values()) <= limit, per_window
    # ... and the stamps agree with the server's clock: no request arrived before the window its
    # slot was counted in began (how long after is the machine's latency, not the limiter's)
    for call, stamp in zip(seen, stamps, strict=True):
        assert stamp["window"] * window <= call.arrived, (call.arrived, stamp)
    # 16 requests at 3 a window take at least 6 windows: the last arrived 5 windows or more after the
    # first window began (measured from that window, not from the first arrival, which may come late
    # in its window on a busy machine)
    first_began = min(int(stamp["window"]) for stamp in stamps) * window
    assert seen[-1].arrived - first_began >= (math.ceil(len(seen) / limit) - 1) * window
    # both workers did the work
    assert {stamp["ppid"] for stamp in stamps} == worker_pids(two_workers)
    assert {r["output"]["ppid"] for r in results} == worker_pids(two_workers)


def test_a_token_budget_is_shared_by_all_branches_on_both_workers(
    two_workers: TwoWorkers, model_server: tuple[Any, RecordingModel]
) -> None:
    server, recorder = model_server
    delay = 0.15  # each call takes this long at the server: a call in flight is visible
    recorder.reset(delay=delay, usage=lambda index: (50 + index % 7, 40 + index % 3))
    budget, branches, calls = 650, 6, 3

    handle = launch(
        two_workers, {"base_url": server.base_url}, {"branches": branches, "calls": calls}, budget
    )
    results = handle.wait_sync(timeout=60)

    record = two_workers.store.get_run(handle.run_id)
    assert record is not None and record.status == "succeeded"  # the composite collects its failures
    assert record.token_budget == budget
    seen = recorder.snapshot()
    # nothing lost across tasks and processes: the run's sums are exactly what the server reported
    assert (record.input_tokens, record.output_tokens) == (
        sum(call.usage[0] for call in seen),
        sum(call.usage[1] for call in seen),
    )
    assert record.input_tokens + record.output_tokens >= budget
    # earlier branches kept their results; the branches that met the spent budget say so
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    assert ok and failed, results
    assert all(r["output"]["answers"] == calls and r["output"]["fallbacks"] == 0 for r in ok)
    assert {r["error"]["type"] for r in failed} == {"TokenBudgetExceededError"}
    assert all("token budget exceeded" in r["error"]["message"] for r in failed), failed
    budget_events = [
        event
        for _, event in two_workers.store.events(handle.run_id)
        if event["status"] == "failed" and event["phase"] == "budget_exceeded"
    ]
    assert {event["path"] for event in budget_events} == {f"branch/{r['key']}" for r in failed}
    # no call started once the budget was spent, except one the other worker had under way:
    # the budget is spent when the completed calls' usage reaches it (in the order they completed)
    total, spent_at = 0, math.inf
    for call in sorted(seen, key=lambda call: call.arrived):
        total += sum(call.usage)
        if total >= budget:
            spent_at = call.arrived + delay
            break
    started_after = [call for call in seen if call.arrived > spent_at]
    assert len(started_after) <= len(two_workers.workers) - 1, (spent_at, started_after)
    needed = next(n for n in range(1, len(seen) + 1) if sum(sum(c.usage) for c in seen[:n]) >= budget)
    assert len(seen) <= needed + len(two_workers.workers) - 1
    # both workers made calls
    assert {(call.stamp or {}).get("ppid") for call in seen} == worker_pids(two_workers)


def test_a_run_that_is_one_loop_ends_with_the_budget_exceeded_status(
    two_workers: TwoWorkers, model_server: tuple[Any, RecordingModel]
) -> None:
    server, recorder = model_server
    recorder.reset()  # 100 tokens a call
    input = {"branch": "solo", "calls": 3}

    handle = launch(two_workers, {"base_url": server.base_url}, input, 150, runnable="limits.model_calls")
    with pytest.raises(WorkflowFailedError) as failed:
        handle.wait_sync(timeout=30)

    assert failed.value.error_type == "TokenBudgetExceededError"
    assert "200 of 150 tokens used" in failed.value.message
    record = two_workers.store.get_run(handle.run_id)
    assert record is not None and record.status == "budget_exceeded"
    assert len(recorder.snapshot()) == 2  # the second call passed the budget; no third started
    assert (record.input_tokens, record.output_tokens) == (120, 80)

"""Beat batches: one registered runnable fanned out over many inputs.

``agentloop.batch`` (what a beat entry sends; see :mod:`agentloop.orchestration.celery_adapter.schedule`)
takes its inputs from the entry or from an input provider of the app's registry, records a
batch run, and sends ``agentloop.batch_chunk`` tasks of at most ``chunk_size``
inputs; each chunk records one child run per input and launches it with
``agentloop.launch``, or, where the packing rule allows, launches its runs together in
``agentloop.batch_pack`` tasks (``batch_packs.py``), each still a run of its own. No chord is
built: a chord of 10,000 members would keep
10,000 results in the backend and one failing member would fail its body.
Fan-in goes through the run store instead: ``agentloop.batch_summary`` counts
the child runs by status (one indexed query) every ``poll_seconds`` until all
have ended, then writes the batch's summary record (counts, token usage,
duration). A batch whose key still has a run in progress is not started again
by the next tick.
"""

from __future__ import annotations

import time
from contextlib import suppress
from typing import Any

from celery import Celery, Task

from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.orchestration.celery_adapter.admission import park_launches, wake_all
from agentloop.orchestration.celery_adapter.batch_packs import batch_pack_size
from agentloop.orchestration.celery_adapter.config import BATCH_PRIORITY
from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.errors import RunExistsError
from agentloop.orchestration.runtime.launches import launch_digest
from agentloop.orchestration.settings.broker import Broker
from agentloop.orchestration.store import CHILD_SUMS, TERMINAL_STATUSES, RunOwner, RunStore
from agentloop.orchestration.store.base import NewRun
from agentloop.orchestration.store.bulk import BulkRunStoreBase
from agentloop.orchestration.wire import BATCH, BATCH_CHUNK, BATCH_PACK, BATCH_SUMMARY, LAUNCH


def _countdown(app: Celery, seconds: float) -> float:
    """``seconds`` as a countdown ``app``'s broker can keep: on RabbitMQ Celery's native delayed
    delivery counts whole seconds and refuses one under 1 s (``calculate_routing_key``), so a
    fraction is rounded up there."""
    return Broker.of(str(app.conf.broker_url or "")).countdown(seconds)


def batch_runnable_name(key: str) -> str:
    return f"batch:{key}"


def _event(
    batch_id: str, key: str, *, status: ProgressStatus, phase: str, done: int, total: int, **data: Any
) -> Any:
    return ProgressEvent(
        run_id=batch_id,
        path="",
        runnable=batch_runnable_name(key),
        iteration=done,
        max_iterations=total,
        phase=phase,
        status=status,
        message=f"{done} of {total} runs ended",
        data=data,
    ).to_dict()


def summarize(store: RunStore, batch_id: str) -> dict[str, Any]:
    """Where the batch stands: counts per status of its runs, tokens and step-cache use, how many
    are still open.

    ``degraded`` runs (they returned, but model calls failed) count apart from ``succeeded``
    and ``failed`` (every other end)."""
    record = store.get_run(batch_id)
    if record is None or not isinstance(record.input, dict):
        raise LookupError(f"no batch run {batch_id!r}")
    expected = int(record.input.get("count", 0))
    children = store.summarize_children(batch_id)
    by_status: dict[str, int] = children["by_status"]
    ended = sum(count for status, count in by_status.items() if status in TERMINAL_STATUSES)
    succeeded, degraded = by_status.get("succeeded", 0), by_status.get("degraded", 0)
    return {
        "runnable": record.input.get("runnable"),
        "total": expected,
        "ended": ended,
        "succeeded": succeeded,
        "degraded": degraded,
        "failed": ended - succeeded - degraded,
        "open": expected - ended,
        "by_status": by_status,
        **{name: children[name] for name in CHILD_SUMS},
    }


def _open_batch(store: RunStore, key: str) -> str | None:
    """The id of a batch of ``key`` that has not ended, if any."""
    for status in ("running", "pending"):
        for run in store.list_runs(limit=1, status=status, runnable=batch_runnable_name(key)):
            return run.id
    return None


def _skipped(running: str) -> dict[str, Any]:
    return {"skipped": True, "reason": "the previous batch is still running", "running": running}


def batch(
    self: Task,
    runnable: str,
    inputs: list[Any] | None = None,
    provider: str | None = None,
    provider_args: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    chunk_size: int = 100,
    token_budget: int | None = None,
    key: str | None = None,
    poll_seconds: float = 5.0,
    max_seconds: float = 86400.0,
    concurrency_key: str | None = None,
) -> dict[str, Any]:
    """Start a batch of ``runnable`` over ``inputs`` (or ``provider``'s); returns its id and size.

    ``concurrency_key`` (optional) is the key every run of the batch counts against (its limit and
    fair share: ``docs/how-to/fairness.md``), else each run's runnable's rule decides."""
    key = key or runnable
    deps = dependencies_of(self.app)
    deps.registry.get(runnable)
    store = deps.store
    earlier = _open_batch(store, key)  # the inputs are not read for a tick that is skipped anyway
    if earlier is not None:
        return _skipped(earlier)
    items = (
        list(inputs)
        if inputs is not None
        else list(deps.registry.input_provider(provider)(**(provider_args or {})))
    )
    size = max(1, int(chunk_size))
    batch_id = str(self.request.id)
    # One atomic step: a batch is open from its record's creation (pending) until its summary ends
    # it, and two ticks at the same instant never both create one. A redelivery finds its own run.
    opened = store.create_run_unless_open(
        run_id=batch_id,
        runnable=batch_runnable_name(key),
        input={"runnable": runnable, "count": len(items), "provider": provider, "chunk_size": size},
        celery_task_id=batch_id,
    )
    if opened.id != batch_id:  # another tick's batch opened meanwhile
        return _skipped(opened.id)
    store.mark_running(batch_id)
    store.append_events(
        batch_id,
        [_event(batch_id, key, status=ProgressStatus.STARTED, phase="start", done=0, total=len(items))],
    )
    for offset in range(0, len(items), size):
        self.app.tasks[BATCH_CHUNK].apply_async(
            args=(batch_id, runnable, items[offset : offset + size], offset, context or {}, token_budget),
            # a keyword, so the chunk is wire version 2 (wire.needed_version): an older worker parks it
            kwargs={"concurrency_key": concurrency_key} if concurrency_key is not None else {},
            priority=BATCH_PRIORITY,
        )  # what Flower and the logs show of it: privacy.PrivateAMQP's redacted reprs
    self.app.tasks[BATCH_SUMMARY].apply_async(
        args=(batch_id, key, time.time(), poll_seconds, max_seconds),
        countdown=_countdown(self.app, min(poll_seconds, 1.0)),
    )
    return {"batch_id": batch_id, "count": len(items), "chunks": -(-len(items) // size)}


def batch_chunk(
    self: Task,
    batch_id: str,
    runnable: str,
    inputs: list[Any],
    offset: int,
    context: dict[str, Any],
    token_budget: int | None = None,
    concurrency_key: str | None = None,
) -> int:
    """Record and launch one run per input of this chunk: packed, where the packing rule allows,
    in ``agentloop.batch_pack`` tasks (``batch_packs.py``), else one ``agentloop.launch`` each.
    Runs under a concurrency key (``concurrency_key``, or the runnable's rule) are never packed:
    they are parked in their keys' lines in the store at once, and their launches sent as slots
    free (``celery_adapter/admission.py``), each admitted against its key's slots."""
    store = dependencies_of(self.app).store
    keyed = (
        concurrency_key is not None
        or dependencies_of(self.app).registry.get(runnable).concurrency is not None
    )
    size = 1 if keyed else batch_pack_size(self, runnable, len(inputs))
    launches: list[dict[str, Any]] = []
    news: list[NewRun] = []
    for index, item in enumerate(inputs, start=int(offset)):
        run_id = f"{batch_id}-{index}"
        kwargs = {"runnable": runnable, "input": item, "context": context, "run_id": run_id}
        if concurrency_key is not None:
            kwargs["concurrency_key"] = concurrency_key
        launches.append(kwargs)
        # owned by the launch sent next, which claims it as its own (orchestration/runtime/launches.py)
        news.append(
            NewRun(
                run_id=run_id,
                runnable=runnable,
                input=item,
                parent_run_id=batch_id,
                token_budget=token_budget,
                celery_task_id=run_id,
                owner=RunOwner.new(launch_digest(kwargs)),
            )
        )
    # Every run recorded before any is sent, in one transaction where the store can (when this
    # chunk is redelivered, its first delivery recorded them: those are left as they are).
    _record_runs(store, news)
    if keyed and launches:  # keyed runs wait in their keys' lines in the store, and are sent as slots free
        for kwargs in park_launches(self.app, runnable, launches, BATCH_PRIORITY):
            self.app.send_task(LAUNCH, kwargs=kwargs, task_id=kwargs["run_id"], priority=BATCH_PRIORITY)
    elif size == 1:
        for kwargs in launches:
            self.app.send_task(LAUNCH, kwargs=kwargs, task_id=kwargs["run_id"], priority=BATCH_PRIORITY)
    else:
        for start in range(0, len(launches), size):
            self.app.send_task(BATCH_PACK, args=(launches[start : start + size],), priority=BATCH_PRIORITY)
    return len(inputs)


def _record_runs(store: RunStore, news: list[NewRun]) -> None:
    """Record each of ``news`` unless its id exists (a redelivered chunk's first delivery recorded it)."""
    if isinstance(store, BulkRunStoreBase):
        store.insert_runs(news)
        return
    for new in news:
        with suppress(RunExistsError):
            store.create_run(
                run_id=new.run_id,
                runnable=new.runnable,
                input=new.input,
                parent_run_id=new.parent_run_id,
                token_budget=new.token_budget,
                celery_task_id=new.celery_task_id,
                owner=new.owner,
            )


def batch_summary(
    self: Task, batch_id: str, key: str, started_at: float, poll_seconds: float, max_seconds: float
) -> dict[str, Any]:
    """Fan-in: once every run of the batch has ended, write the batch's summary record."""
    store = dependencies_of(self.app).store
    state = summarize(store, batch_id)
    elapsed = time.time() - started_at
    if state["open"] > 0 and elapsed < max_seconds:
        wake_all(self.app)  # the backstop of parked runs whose wake was lost (``admission.py``)
        self.app.tasks[BATCH_SUMMARY].apply_async(
            args=(batch_id, key, started_at, poll_seconds, max_seconds),
            countdown=_countdown(self.app, poll_seconds),
        )
        return {"batch_id": batch_id, "pending": state["open"]}
    record = store.get_run(batch_id)
    if record is not None and record.is_finished:  # a redelivered or duplicated summary: it ended
        return dict(record.output) if isinstance(record.output, dict) else {"batch_id": batch_id}
    summary = {**state, "duration_seconds": round(elapsed, 3)}
    # only what the batch's record lacks: a summary whose worker died after adding it adds nothing again
    recorded = (record.input_tokens, record.output_tokens) if record is not None else (0, 0)
    missing = (state["input_tokens"] - recorded[0], state["output_tokens"] - recorded[1])
    if missing[0] > 0 or missing[1] > 0:
        store.add_usage(batch_id, max(missing[0], 0), max(missing[1], 0))
    timed_out = state["open"] > 0
    store.append_events(
        batch_id,
        [_event(
            batch_id, key,
            status=ProgressStatus.FAILED if timed_out else ProgressStatus.COMPLETED,
            phase="timed_out" if timed_out else "done",
            done=state["ended"], total=state["total"],
            succeeded=state["succeeded"], degraded=state["degraded"], failed=state["failed"],
        )],
    )  # fmt: skip
    if timed_out:
        store.finish_run(
            batch_id,
            status="failed",
            output=summary,
            error={
                "type": "BatchTimeout",
                "message": f"{state['open']} runs still open after {max_seconds}s",
            },
        )
    else:
        store.finish_run(batch_id, status="succeeded", output=summary)
    return summary


def install_batch_tasks(app: Celery) -> None:
    """Register the batch tasks on ``app``."""
    for name, function in ((BATCH, batch), (BATCH_CHUNK, batch_chunk), (BATCH_SUMMARY, batch_summary)):
        app.task(name=name, bind=True, shared=False)(function)

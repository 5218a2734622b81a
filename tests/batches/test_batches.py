"""Beat batches: schedules as data, chunked fan-out with fan-in through the run store,
no overlapping batches, and a real beat tick on a real worker."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.batches import summarize
from agentloop.orchestration.celery_adapter.schedule import batch_entry, schedule_from_json
from agentloop.orchestration.errors import ScheduleError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import RunStore, open_store
from agentloop.orchestration.wire import BATCH, BATCH_CHUNK, BATCH_SUMMARY
from tests.services.redis_server import ServiceUnavailable, private_redis_server
from tests.services.worker import run_worker_process

T = TypeVar("T")

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent


# ----- schedules, on a frozen clock -----------------------------------------------------------------


def frozen(year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def test_a_crontab_entry_is_due_exactly_at_its_minute_in_utc() -> None:
    entry = schedule_from_json(
        json.dumps([{"name": "nightly", "runnable": "parity.count", "crontab": "0 3 * * *", "inputs": [1]}])
    )["nightly"]
    when = entry["schedule"]
    last_run = frozen(2026, 11, 29, 3, 0)

    when.nowfun = lambda: frozen(2026, 11, 30, 2, 59)
    assert when.is_due(last_run).is_due is False
    when.nowfun = lambda: frozen(2026, 11, 30, 3, 0)
    assert when.is_due(last_run).is_due is True
    assert entry["task"] == BATCH
    assert entry["kwargs"]["key"] == "nightly"


def test_an_entry_carries_expires_and_its_inputs_or_provider() -> None:
    entry = batch_entry(
        runnable="parity.count", every=30, provider="open", provider_args={"n": 2}, expires=25
    )
    assert entry["options"] == {"expires": 25.0}
    assert entry["kwargs"]["provider"] == "open" and entry["kwargs"]["inputs"] is None
    assert entry["schedule"].run_every.total_seconds() == 30


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ("{", "not valid JSON"),
        ('{"name": "x"}', "JSON list"),
        ('[{"runnable": "x", "every": 1, "inputs": []}]', "'name'"),
        ('[{"name": "a", "runnable": "x", "every": 1, "crontab": "* * * * *", "inputs": []}]', "exactly one"),
        ('[{"name": "a", "runnable": "x", "every": 1}]', "'inputs' and 'provider'"),
        ('[{"name": "a", "runnable": "x", "crontab": "0 3 * *", "inputs": []}]', "5 fields"),
        ('[{"name": "a", "runnable": "x", "every": 1, "inputs": [], "colour": 1}]', "unknown keys"),
    ],
)
def test_a_bad_schedule_is_a_clear_error(entries: str, problem: str) -> None:
    with pytest.raises(ScheduleError, match=problem):
        schedule_from_json(entries)


# ----- fan-out and fan-in ---------------------------------------------------------------------------


@pytest.fixture
def batch_app(sqlite_run_store: RunStore, parity_registry: RunnableRegistry) -> Any:
    app = create_app(
        registry=parity_registry,
        store=sqlite_run_store,
        overrides={"broker_url": "memory://", "result_backend": "cache+memory://"},
    )
    yield app
    app.close()


def test_ten_thousand_inputs_go_out_in_chunks_and_never_as_one_chord(
    batch_app: Any, sqlite_run_store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[str, tuple[Any, ...]]] = []

    def capture(name: str) -> Any:
        def apply_async(args: tuple[Any, ...] = (), **options: Any) -> None:
            sent.append((name, args))

        return apply_async

    monkeypatch.setattr(batch_app.tasks[BATCH_CHUNK], "apply_async", capture(BATCH_CHUNK))
    monkeypatch.setattr(batch_app.tasks[BATCH_SUMMARY], "apply_async", capture(BATCH_SUMMARY))

    inputs = list(range(10_000))
    answer = batch_app.tasks[BATCH].apply(kwargs={"runnable": "parity.count", "inputs": inputs}).get()

    chunks = [args for name, args in sent if name == BATCH_CHUNK]
    assert answer["count"] == 10_000 and answer["chunks"] == 100
    assert len(chunks) == 100 and max(len(args[2]) for args in chunks) == 100
    assert [item for args in chunks for item in args[2]] == inputs
    assert [name for name, _ in sent].count(BATCH_SUMMARY) == 1
    record = sqlite_run_store.get_run(answer["batch_id"])
    assert record is not None and record.status == "running" and record.input["count"] == 10_000


def test_a_batch_whose_previous_run_is_still_going_is_not_started_again(
    batch_app: Any, sqlite_run_store: RunStore
) -> None:
    sqlite_run_store.create_run(run_id="earlier", runnable="batch:nightly", input={"count": 1})
    sqlite_run_store.mark_running("earlier")
    answer = (
        batch_app.tasks[BATCH]
        .apply(kwargs={"runnable": "parity.count", "inputs": [1], "key": "nightly"})
        .get()
    )
    assert answer == {"skipped": True, "reason": "the previous batch is still running", "running": "earlier"}


def test_a_batch_runs_every_input_and_writes_its_summary(memory_celery: Any) -> None:
    app, store = memory_celery.app, memory_celery.store
    memory_celery.registry.register_input_provider("numbers_with_a_bad_one", lambda n: [*range(n), None])
    answer = app.send_task(
        BATCH,
        kwargs={
            "runnable": "parity.count",
            "provider": "numbers_with_a_bad_one",
            "provider_args": {"n": 24},
            "chunk_size": 7,
            "poll_seconds": 0.2,
            "key": "summary-test",
        },
    ).get(timeout=30)
    batch_id = answer["batch_id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        record = store.get_run(batch_id)
        if record is not None and record.status != "running":
            break
        time.sleep(0.2)
    assert record is not None and record.status == "succeeded", summarize(store, batch_id)
    summary = record.output
    assert (summary["total"], summary["succeeded"], summary["failed"], summary["open"]) == (25, 24, 1, 0)
    assert summary["duration_seconds"] > 0
    children = store.list_runs(limit=100, parent_run_id=batch_id)
    assert sorted(r.output for r in children if r.status == "succeeded") == [n + 3 for n in range(24)]


# ----- a real beat tick -----------------------------------------------------------------------------


def batch_answers(redis_url: str) -> list[dict[str, Any]]:
    """What every ``agentloop.batch`` task answered so far, read from the result backend:
    ``{"batch_id": ...}`` for a batch it started, ``{"skipped": True, ...}`` for one it did not."""
    import redis

    answers = []
    with redis.Redis.from_url(redis_url) as client:
        for key in client.scan_iter("celery-task-meta-*"):
            meta = json.loads(client.get(key) or "{}")
            answer = meta.get("result")
            is_batch = isinstance(answer, dict) and (answer.get("skipped") is True or "chunks" in answer)
            if meta.get("status") == "SUCCESS" and is_batch:
                answers.append(answer)
    return answers


def wait_for(condition: Callable[[], T | None], *, ceiling: float, what: str) -> T:
    """Poll ``condition`` until it gives a value; ``ceiling`` seconds only end a test that hangs."""
    for _ in range(int(ceiling / 0.2)):
        value = condition()
        if value is not None:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {ceiling:g}s: {what}")


@pytest.mark.integration
def test_beat_ticks_start_batches_on_a_real_worker_and_never_overlap_them(tmp_path: Path) -> None:
    import workflows.durable  # noqa: F401

    database_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    store, _ = open_store(database_url)
    schedule = [
        {
            "name": "every-second",
            "runnable": "durable.slow_count",
            "every": 1,
            "inputs": [4, 4],
            "context": {"step_seconds": 0.4},
            "expires": 5,
        }
    ]
    try:
        server_cm = private_redis_server()
        server = server_cm.__enter__()
    except ServiceUnavailable as unavailable:
        pytest.skip(unavailable.reason)
    env = {"DATABASE_URL": database_url, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}

    def started_two_and_refused_one() -> bool | None:
        answers = batch_answers(server.url)
        started, refused = sum("chunks" in a for a in answers), sum("skipped" in a for a in answers)
        return True if started >= 2 and refused >= 1 else None

    def settled() -> tuple[list[dict[str, Any]], list[Any]] | None:
        """The ticks' answers and the batches, once every batch a tick started has finished."""
        answers = batch_answers(server.url)
        finished = store.list_runs(limit=50, runnable="batch:every-second")
        started = {a["batch_id"] for a in answers if "chunks" in a}
        done = started == {b.id for b in finished} and all(b.status != "running" for b in finished)
        return (answers, finished) if done else None

    try:
        with run_worker_process(
            broker_url=server.url, result_backend=server.url, imports=["workflows.durable"],
            env=env, concurrency=2,
        ):  # fmt: skip
            beat_env = {
                **{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "RESULT_BACKEND")},
                **env,
                "BROKER_URL": server.url,
                "RESULT_BACKEND": server.url,
                "AGENTLOOP_BEAT_SCHEDULE": json.dumps(schedule),
            }
            beat = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "agentloop", "beat", "--loglevel", "INFO",
                 "-s", str(tmp_path / "beat-schedule")],
                env=beat_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            try:
                # a batch takes 4 steps of 0.4 s and beat ticks every second: ticks come while one runs
                wait_for(started_two_and_refused_one, ceiling=90, what="two batches started, a tick refused")
            finally:
                beat.terminate()
                beat_log = beat.communicate(timeout=10)[0]
            answers, finished = wait_for(settled, ceiling=60, what="every batch a tick started finished")
    finally:
        server_cm.__exit__(None, None, None)

    assert "Sending due task every-second (agentloop.batch)" in beat_log, beat_log[-2000:]
    started = {a["batch_id"] for a in answers if "chunks" in a}
    refused = [a for a in answers if a.get("skipped")]
    # a tick that found a batch still running started nothing, and named the one running
    assert len(started) >= 2 and refused and {a["running"] for a in refused} <= started
    ordered = sorted(finished, key=lambda b: b.created_at)
    for earlier, later in itertools.pairwise(ordered):
        assert earlier.finished_at is not None and earlier.finished_at <= later.created_at
    for record in finished:
        assert record.status == "succeeded"
        assert (record.output["total"], record.output["succeeded"]) == (2, 2)


def test_a_summary_delivered_twice_counts_the_batch_usage_once_and_ends_it_once(
    batch_app: Any, sqlite_run_store: RunStore
) -> None:
    """A redelivered ``batch_summary`` (its worker died after adding the usage, or a duplicate of the
    chain) neither adds the children's usage again nor writes a second end."""
    batch_id = "nightly-batch"
    sqlite_run_store.create_run(
        run_id=batch_id, runnable="batch:nightly", input={"count": 2, "runnable": "parity.count"}
    )
    sqlite_run_store.mark_running(batch_id)
    for index, (input_tokens, output_tokens) in enumerate([(10, 5), (7, 3)]):
        child = f"{batch_id}-{index}"
        sqlite_run_store.create_run(
            run_id=child, runnable="parity.count", input=index, root_run_id=child, parent_run_id=batch_id
        )
        sqlite_run_store.mark_running(child)
        sqlite_run_store.add_usage(child, input_tokens, output_tokens)
        sqlite_run_store.finish_run(child, status="succeeded", output=index)
    summary = batch_app.tasks[BATCH_SUMMARY]
    arguments = (batch_id, "nightly", time.time(), 0.1, 60.0)

    first = summary.apply(args=arguments).get()
    again = summary.apply(args=arguments).get()

    record = sqlite_run_store.get_run(batch_id)
    assert record is not None and record.status == "succeeded"
    assert (record.input_tokens, record.output_tokens) == (17, 8)
    assert again == first == record.output
    ends = [event for _, event in sqlite_run_store.events(batch_id) if event["phase"] == "done"]
    assert len(ends) == 1

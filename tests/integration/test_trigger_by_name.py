"""Another service starts a registered workflow by name, importing only ``celery``,
follows its progress while it runs, and gets its result; bad messages get a clear
error and leave the worker up."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from celery.exceptions import InvalidTaskError

pytestmark = pytest.mark.integration

CLIENT = textwrap.dedent(
    """
    import json, sys, time
    from celery import Celery

    url = sys.argv[1]
    app = Celery(broker=url, backend=url)
    app.conf.task_default_queue = "agentloop"
    result = app.send_task(
        "agentloop.launch", kwargs={"runnable": "parity.slow_fan_short", "input": 2}
    )
    seen, after, statuses = [], 0, []
    while not result.ready():
        asked = app.send_task("agentloop.progress", kwargs={"run_id": result.id, "after_id": after})
        page = asked.get(timeout=10)
        after = page["last_id"]
        seen.extend(page["events"])
        statuses.append(page["status"])
        time.sleep(0.05)
    ours = {"agentloop", "actions", "loops", "pipelines", "orchestration"}
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ours)
    print(json.dumps({"result": result.get(timeout=30), "events_while_running": len(seen),
                      "statuses": sorted(set(statuses)), "agent_modules": loaded}))
    """
)


def test_a_service_that_imports_only_celery_triggers_follows_and_gets_the_result(redis_celery: Any) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, redis_celery.broker_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["agent_modules"] == []
    assert report["events_while_running"] > 0
    assert "running" in report["statuses"]
    assert report["result"] == [
        {"key": "0", "ok": True, "output": 6, "error": None},
        {"key": "1", "ok": True, "output": 7, "error": None},
    ]


def test_an_unknown_runnable_is_a_clear_failure_and_the_worker_stays_up(redis_celery: Any) -> None:
    app = redis_celery.app
    result = app.send_task("agentloop.launch", kwargs={"runnable": "no.such.workflow", "input": 1})
    with pytest.raises(Exception) as failure:
        result.get(timeout=30)
    assert "unknown runnable '<hidden>'; registered: " in str(failure.value)  # never echoed
    record = redis_celery.store.get_run(result.id)
    assert record is not None and record.status == "failed"
    assert record.error["type"] == "UnknownRunnableError"
    assert app.send_task("agentloop.ping").get(timeout=30) == "pong"
    assert redis_celery.worker.is_alive()


def test_a_context_that_is_not_an_object_is_rejected_clearly(redis_celery: Any) -> None:
    app = redis_celery.app
    result = app.send_task(
        "agentloop.launch", kwargs={"runnable": "parity.count", "input": 1, "context": [1]}
    )
    with pytest.raises(Exception) as failure:
        result.get(timeout=30)
    assert "context spec must be a JSON object" in str(failure.value)
    assert app.send_task("agentloop.ping").get(timeout=30) == "pong"


def pickle_refusals(log: str) -> int:
    """How many log records (their first line, not a traceback's) refused a pickled message."""
    phrase = "Refusing to deserialize untrusted content of type pickle"
    return sum(1 for line in log.splitlines() if line.startswith("[") and phrase in line)


def test_a_pickled_message_is_refused_and_never_executed(redis_celery: Any) -> None:
    app, worker = redis_celery.app, redis_celery.worker
    refused_before = pickle_refusals(worker.log_text())
    pickled = app.send_task(
        "agentloop.launch", kwargs={"runnable": "parity.count", "input": 1}, serializer="pickle"
    )
    # a message sent after it has run: the worker has taken the pickled one off the queue by now
    later = app.send_task("agentloop.launch", kwargs={"runnable": "parity.count", "input": 1})
    assert later.get(timeout=30) == 4

    assert pickle_refusals(worker.log_text()) == refused_before + 1, worker.log_text()[-3000:]
    # refused at the worker's edge: its sender is told at once, and the run it named is a failed one
    with pytest.raises(InvalidTaskError, match="Refusing to deserialize untrusted content of type pickle"):
        pickled.get(timeout=5)
    record = redis_celery.store.get_run(pickled.id)
    assert record is not None and record.status == "failed" and record.started_at is None  # it never ran
    assert redis_celery.store.events(pickled.id) == []

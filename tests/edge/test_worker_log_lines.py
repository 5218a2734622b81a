"""The worker's log keeps what an operator can act on: a pipeline or composite launch replaces
itself with its canvas (Celery's ``Ignore``), and that is not logged as ``ignored``."""

from __future__ import annotations

import logging
import time

from celery.app.trace import LOG_IGNORED, log_policy_ignore
from edge_support import EdgeRig

from agentloop.orchestration.celery_adapter.log_filter import RedactingLogFilter


def test_a_pipeline_launch_is_not_logged_as_ignored(edge_rig: EdgeRig) -> None:
    result = edge_rig.app.send_task("agentloop.launch", kwargs={"runnable": "edge.two_echoes", "input": 3})
    assert result.get(timeout=30) == 3
    time.sleep(0.5)  # the worker's log is written by its processes as they go

    log = edge_rig.worker.log_text()
    assert f"agentloop.launch[{result.id}] received" in log
    assert f"agentloop.launch[{result.id}] ignored" not in log
    assert " ignored" not in "\n".join(line for line in log.splitlines() if "agentloop." in line)


def trace_record(name: str, description: str) -> logging.LogRecord:
    """The record Celery's trace logs when a task raises ``Ignore`` (``celery/app/trace.py``)."""
    context = {"id": "t-1", "name": name, "description": description, "hostname": "w", "exc": "Ignore()"}
    return logging.LogRecord(
        "celery.app.trace", logging.INFO, __file__, 1, LOG_IGNORED.strip(), (context,), None
    )


def test_only_private_tasks_ignored_lines_are_dropped() -> None:
    keep = RedactingLogFilter()

    assert keep.filter(trace_record("agentloop.stage", log_policy_ignore.description)) is False
    assert keep.filter(trace_record("myapp.tasks.cleanup", log_policy_ignore.description)) is True
    assert keep.filter(trace_record("agentloop.launch", "Task already completed successfully.")) is True

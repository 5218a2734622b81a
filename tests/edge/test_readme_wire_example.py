"""The wire contract's example (``docs/concepts/wire.md``, once in the README), run exactly as it
is written, against a real worker.

The block is read from the page (its first ``python`` block), so the example and this test cannot
drift apart. The worker has the example's runnable
(``record_search.demo``) registered and no model key: the offline model answers.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from edge_support import EdgeRig

from agentloop.orchestration.client import mark_launch_sent

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "wire.md"


def wire_example() -> str:
    match = re.search(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    assert match is not None, "docs/concepts/wire.md has no python block"
    return match.group(1)


def test_the_readmes_wire_example_runs_as_written(edge_rig: EdgeRig) -> None:
    namespace: dict[str, Any] = {"REDIS_URL": edge_rig.broker_url}
    try:
        exec(compile(wire_example(), "docs/concepts/wire.md", "exec"), namespace)
    finally:
        if "app" in namespace:
            namespace["app"].close()

    run_id, page, answer = namespace["run_id"], namespace["page"], namespace["answer"]
    assert namespace["result"].id == run_id
    assert page["run_id"] == run_id and page["status"] in {"pending", "running", "succeeded"}
    assert answer["question_count"] == 1 and answer["answered_count"] == 1
    record = edge_rig.store.get_run(run_id)
    assert record is not None and record.status == "succeeded"


def progress(rig: EdgeRig, run_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = rig.app.send_task("agentloop.progress", kwargs={"run_id": run_id}).get(
        timeout=30
    )
    return answer


def test_progress_tells_a_launch_on_its_way_from_an_unknown_id(edge_rig: EdgeRig) -> None:
    parked = f"parked-{uuid.uuid4()}"
    mark_launch_sent(edge_rig.app, parked)  # sent, to a queue no worker reads: still on its way
    edge_rig.app.send_task(
        "agentloop.launch",
        kwargs={"runnable": "edge.echo", "input": 1},
        task_id=parked,
        queue="nobody-reads-this",
    )

    assert progress(edge_rig, parked)["status"] == "pending"
    assert progress(edge_rig, f"never-sent-{uuid.uuid4()}")["status"] == "not_found"


def test_the_client_marks_its_launches_and_progress_follows_them_to_the_end(edge_rig: EdgeRig) -> None:
    from agentloop.orchestration.client import CeleryAgentRunner

    handle = CeleryAgentRunner.create(runnable="edge.echo", app=edge_rig.app).request_sync(input=5)

    assert progress(edge_rig, handle.run_id)["status"] in {"pending", "running", "succeeded"}
    assert handle.wait_sync(timeout=30) == 5
    assert progress(edge_rig, handle.run_id)["status"] == "succeeded"


def test_marking_an_id_that_has_a_result_changes_nothing(edge_rig: EdgeRig) -> None:
    result = edge_rig.app.send_task("agentloop.launch", kwargs={"runnable": "edge.echo", "input": 7})
    assert result.get(timeout=30) == 7

    mark_launch_sent(edge_rig.app, result.id)

    assert edge_rig.app.AsyncResult(result.id).state == "SUCCESS"


@pytest.mark.parametrize("backend", ["rpc://", None], ids=["rpc", "no result backend"])
def test_marking_needs_a_key_value_backend_and_never_stops_a_launch(backend: str | None) -> None:
    app = Celery(broker="memory://", backend=backend, set_as_current=False)
    try:
        mark_launch_sent(app, "any-id")  # nothing to write it to: nothing written, nothing raised
    finally:
        app.close()

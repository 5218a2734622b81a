"""``agentloop.progress`` for a run id no launch can have (empty, too long, with a NUL, not a
string) answers the contract's ``not_found`` page on a real worker, as for an id nothing is known
of, never a Celery traceback."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from edge_support import EdgeRig

from agentloop.orchestration.wire import MAX_NAME_CHARS, PROGRESS

IDS = {
    "empty": "",
    "too long": "r" * (MAX_NAME_CHARS + 1),
    "with a NUL": "run\x00id",
    "a number": 12,
    "null": None,
    "a list": ["run"],
    "unknown": str(uuid.uuid4()),
}


@pytest.mark.parametrize("run_id", IDS.values(), ids=IDS.keys())
def test_progress_of_an_id_no_run_can_have_is_not_found(edge_rig: EdgeRig, run_id: Any) -> None:
    page = edge_rig.app.send_task(PROGRESS, kwargs={"run_id": run_id, "after_id": 0}).get(timeout=30)

    assert page == {
        "run_id": run_id,
        "status": "not_found",
        "error": None,
        "usage": None,
        "events": [],
        "last_id": 0,
    }

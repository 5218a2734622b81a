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


PAGES = {
    "after_id a word": ({"after_id": "abc"}, "after_id must be a whole number of at least 0, got str"),
    "after_id null": ({"after_id": None}, "after_id must be a whole number of at least 0, got NoneType"),
    "after_id negative": ({"after_id": -1}, "after_id must be a whole number of at least 0, got -1"),
    "after_id true": ({"after_id": True}, "after_id must be a whole number of at least 0, got bool"),
    "after_id a float": ({"after_id": 1.5}, "after_id must be a whole number of at least 0, got float"),
    "limit a list": ({"limit": [5]}, "limit must be a whole number of at least 1, got list"),
    "limit zero": ({"limit": 0}, "limit must be a whole number of at least 1, got 0"),
}


@pytest.mark.parametrize(("bounds", "says"), PAGES.values(), ids=PAGES.keys())
def test_progress_with_a_page_bound_that_is_not_a_count_is_refused_with_a_typed_error(
    edge_rig: EdgeRig, bounds: dict[str, Any], says: str
) -> None:
    with pytest.raises(Exception) as raised:
        edge_rig.app.send_task(PROGRESS, kwargs={"run_id": str(uuid.uuid4()), **bounds}).get(timeout=30)

    assert f"{type(raised.value).__name__}: {raised.value}" == f"LaunchRequestError: {says}"


def test_progress_takes_page_bounds_as_decimal_strings_and_cuts_a_large_limit(edge_rig: EdgeRig) -> None:
    run_id = str(uuid.uuid4())
    kwargs = {"run_id": run_id, "after_id": "7", "limit": 10**9}

    page = edge_rig.app.send_task(PROGRESS, kwargs=kwargs).get(timeout=30)

    assert page["status"] == "not_found" and page["last_id"] == 7

"""Values the database cannot hold are refused before it sees them, on SQLite and on PostgreSQL: the
run records the reason (or, for a run id no run can have, the launch is refused and nothing is
recorded), and the client reads a clear error instead of ``sqlalchemy.exc.DataError``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from durability_support import DurabilityRig, new_id, running_rig

from agentloop.orchestration.store import open_store

LONG = "r" * 256
HUGE = "r" * 100_000

#: (case, launch arguments, the run id it is recorded under or None, what the error says)
CASES: list[tuple[str, dict[str, Any], bool, str]] = [
    ("NUL in the input", {"input": {"q": "a\x00b"}}, True, "input contains a NUL character"),
    ("NUL in an input key", {"input": {"q\x00": 1}}, True, "input contains a NUL character"),
    ("NUL deep in the input", {"input": [[{"x": ["\x00"]}]]}, True, "input contains a NUL character"),
    ("NUL in the runnable", {"runnable": "durability.count\x00"}, True, "runnable must not contain a NUL"),
    ("runnable of 256 chars", {"runnable": LONG}, True, "runnable is 256 characters long; at most 255"),
    ("runnable of 100k chars", {"runnable": HUGE}, True, "runnable is 100000 characters long"),
    ("budget of 2**63", {"token_budget": 2**63}, True, "token_budget must be at most 9223372036854775807"),
    ("budget of 2**64", {"token_budget": 2**64}, True, "token_budget must be at most 9223372036854775807"),
    ("NUL in the run id", {"run_id": "run-\x00"}, False, "run_id must not contain a NUL character"),
    ("run id of 256 chars", {"run_id": LONG}, False, "run_id is 256 characters long; at most 255"),
    ("run id of 100k chars", {"run_id": HUGE}, False, "run_id is 100000 characters long"),
]


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def any_rig(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DurabilityRig]:
    """A real worker on a SQLite file, or on the private PostgreSQL database."""
    redis_url = request.getfixturevalue("redis_url")
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_database_url")
    else:
        url = f"sqlite:///{Path(tmp_path_factory.mktemp('unstorable')) / 'runs.sqlite3'}"
        store, _ = open_store(url)
        store.engine.dispose()
    with running_rig(url, redis_url, retry_seconds=5, concurrency=2) as durability_rig:
        yield durability_rig


@pytest.mark.parametrize(("case", "change", "recorded", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_value_the_database_cannot_hold_is_a_clear_error(
    any_rig: DurabilityRig, case: str, change: dict[str, Any], recorded: bool, words: str
) -> None:
    task_id = new_id()
    arguments = {"runnable": "durability.count", "input": 1, "context": {"step_seconds": 0}, **change}

    result = any_rig.app.send_task("agentloop.launch", kwargs=arguments, task_id=task_id)

    with pytest.raises(Exception) as raised:
        result.get(timeout=30)
    assert words in str(raised.value)
    assert "DataError" not in repr(raised.value)
    record = any_rig.store.get_run(task_id if recorded else str(change.get("run_id")))
    if not recorded:
        assert record is None and any_rig.store.get_run(task_id) is None  # nothing is recorded
        return
    assert record is not None and record.status == "failed"
    assert record.error["type"] == "LaunchRequestError" and words in record.error["message"]
    assert "\x00" not in record.runnable and len(record.runnable) <= 255
    assert record.input is None

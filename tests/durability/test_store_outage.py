"""A PostgreSQL outage on a real worker: runs in flight and runs queued during it carry on once the
database is back; a run that fails is marked ended, whichever task could reach the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from durability_support import DurabilityRig, new_id, running_rig

pytestmark = pytest.mark.integration


def _launch_many(durability_rig: DurabilityRig, count: int, goal: int, step: float) -> list[str]:
    ids = [new_id() for _ in range(count)]
    for index, run_id in enumerate(ids):
        runnable = "durability.two_counts" if index % 2 else "durability.count"
        durability_rig.launch(runnable, goal, task_id=run_id, context={"step_seconds": step})
    return ids


def _until_running(durability_rig: DurabilityRig, ids: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(
        getattr(durability_rig.store.get_run(run_id), "status", None) == "running" for run_id in ids
    ):
        assert time.monotonic() < deadline, "no run started"
        time.sleep(0.1)
    time.sleep(0.5)


def _expected(durability_rig: DurabilityRig, run_id: str, goal: int) -> dict[str, int]:
    record = durability_rig.store.get_run(run_id)
    assert record is not None
    return {"counted": goal + 1} if record.runnable == "durability.two_counts" else {"counted": goal}


def test_runs_in_flight_ride_out_a_five_second_outage(
    durability_rig: DurabilityRig, outage: Callable[[float], None]
) -> None:
    ids = _launch_many(durability_rig, 8, goal=8, step=0.2)
    _until_running(
        durability_rig, ids
    )  # four runs mid-way through their loops, the others queued behind them

    outage(5.0)

    for run_id in ids:
        assert durability_rig.result(run_id) == _expected(durability_rig, run_id, 8)
        record = durability_rig.ended(run_id)
        assert (record.status, record.error) == ("succeeded", None)


def test_runs_launched_during_the_outage_are_recorded_and_run_once_it_ends(
    durability_rig: DurabilityRig, outage: Callable[[float], None]
) -> None:
    down = threading.Thread(target=outage, args=(5.0,))
    down.start()
    time.sleep(0.3)
    ids = _launch_many(durability_rig, 6, goal=3, step=0.05)  # their launches find no database
    down.join()

    for run_id in ids:
        assert durability_rig.result(run_id) == _expected(durability_rig, run_id, 3)
        assert durability_rig.ended(run_id).status == "succeeded"


@pytest.fixture(scope="module")
def impatient_rig(pg_database_url: str, redis_url: str) -> Iterator[DurabilityRig]:
    """A worker whose store calls give up after 1 s: its tasks are retried by Celery instead."""
    with running_rig(pg_database_url, redis_url, retry_seconds=1) as running:
        yield running


def _down_for(durability_rig: DurabilityRig, seconds: float) -> threading.Thread:
    def down() -> None:
        assert durability_rig.proxy is not None
        with durability_rig.proxy.refusing():
            time.sleep(seconds)

    thread = threading.Thread(target=down)
    thread.start()
    return thread


def test_past_the_stores_retries_a_task_is_retried_and_the_run_goes_on(impatient_rig: DurabilityRig) -> None:
    durability_rig = impatient_rig
    ids = _launch_many(durability_rig, 4, goal=10, step=0.1)
    _until_running(durability_rig, ids)
    _down_for(durability_rig, 4.0).join()  # past the 1 s of store retries: each task is sent again

    for run_id in ids:
        assert durability_rig.result(run_id) == _expected(durability_rig, run_id, 10)
        assert durability_rig.ended(run_id).status == "succeeded"
    assert "StoreUnavailableError" in durability_rig.worker.log_text()


def test_a_failure_while_the_store_is_away_is_recorded_once_it_is_back(impatient_rig: DurabilityRig) -> None:
    durability_rig = impatient_rig
    run_id = new_id()
    result = durability_rig.launch("durability.fail_after", 5, task_id=run_id, context={"step_seconds": 0.2})
    _until_running(durability_rig, [run_id], timeout=30.0)
    _down_for(durability_rig, 3.0).join()  # the step fails while the store is away: its end cannot be written

    with pytest.raises(Exception, match="failed after 5 steps"):
        result.get(timeout=120)
    record = durability_rig.ended(run_id)
    assert record.status == "failed"
    assert record.error == {"type": "ValueError", "message": "failed after 5 steps"}


def test_a_task_that_fails_outside_the_engine_still_ends_its_run(durability_rig: DurabilityRig) -> None:
    # the loop finishes, then its result cannot be stored: no engine code records the run's end,
    # the task's on_failure does
    run_id = new_id()
    with pytest.raises(Exception, match="JSON"):
        durability_rig.launch("durability.set_result", 2, task_id=run_id, context={"step_seconds": 0}).get(
            timeout=60
        )
    record = durability_rig.ended(run_id)
    assert record.status == "failed"
    assert record.error["type"] == "StateNotSerializableError"

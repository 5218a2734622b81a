"""A run id names one run, an ended run is never rewritten, an owned run ends only for its owner,
and every store refuses a value its columns cannot hold before the database sees it: the same in
memory, on SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop.actions import StateNotSerializableError
from agentloop.orchestration.errors import (
    RunAlreadyEndedError,
    RunExistsError,
    RunNotFoundError,
    RunOwnershipError,
)
from agentloop.orchestration.store import RunOwner, RunStore


def test_finishing_an_ended_run_again_is_refused_and_changes_nothing(run_store: RunStore) -> None:
    run_store.create_run(run_id="r1", runnable="search", input={"q": 1})
    run_store.finish_run("r1", status="succeeded", output={"answer": 42})
    ended = run_store.get_run("r1")

    for status, output, error in [
        ("succeeded", {"answer": "attacker's"}, None),
        ("failed", None, {"type": "Forged", "message": "flipped"}),
        ("cancelled", None, None),
    ]:
        with pytest.raises(RunAlreadyEndedError, match="'r1' has already ended \\(succeeded\\)") as refused:
            run_store.finish_run("r1", status=status, output=output, error=error)
        assert refused.value.record == ended
    assert run_store.get_run("r1") == ended


def test_finishing_an_ended_run_with_the_outcome_it_has_is_a_no_op(run_store: RunStore) -> None:
    # a finish retried after its commit's acknowledgement was lost, or a redelivered finalize
    run_store.create_run(run_id="r1", runnable="search", input=None)
    run_store.finish_run("r1", status="failed", error=ValueError("bad input"))
    ended = run_store.get_run("r1")
    run_store.finish_run("r1", status="failed", error=ValueError("bad input"))
    run_store.finish_run("r1", status="failed", error={"type": "ValueError", "message": "bad input"})
    assert run_store.get_run("r1") == ended


def test_an_owned_run_ends_only_with_its_owners_token(run_store: RunStore) -> None:
    owner = RunOwner.new("digest-of-the-launch")
    run_store.create_run(run_id="r1", runnable="search", input={}, owner=owner)
    assert run_store.run_owner("r1") == owner
    assert "token" not in repr(owner).replace("token=", "") and owner.token not in repr(owner)

    for forged in (None, "", "not-the-token", owner.token[:-1], owner.token + "x"):
        with pytest.raises(RunOwnershipError, match="belongs to another launch"):
            run_store.finish_run("r1", status="succeeded", output="attacker's", owner_token=forged)
    assert run_store.get_run("r1").status == "pending"  # type: ignore[union-attr]

    assert run_store.run_owner_and_status("r1") == (owner, "pending")  # one read, for the run gate
    run_store.finish_run("r1", status="succeeded", output="mine", owner_token=owner.token)
    record = run_store.get_run("r1")
    assert record is not None and (record.status, record.output) == ("succeeded", "mine")
    assert run_store.run_owner_and_status("r1") == (owner, "succeeded")
    with pytest.raises(RunNotFoundError):
        run_store.run_owner_and_status("r2")
    with pytest.raises(RunOwnershipError):  # the owner is checked before the end, so nothing leaks
        run_store.finish_run("r1", status="succeeded", output="mine", owner_token="guess")


def test_a_run_created_without_an_owner_ends_for_anyone(run_store: RunStore) -> None:
    run_store.create_run(run_id="r1", runnable="search", input={})
    assert run_store.run_owner("r1") is None
    run_store.finish_run("r1", status="cancelled", owner_token="whatever")
    assert run_store.get_run("r1").status == "cancelled"  # type: ignore[union-attr]


def test_a_refused_create_keeps_the_first_owner(run_store: RunStore) -> None:
    first = RunOwner.new("first")
    run_store.create_run(run_id="r1", runnable="search", input={}, owner=first)
    with pytest.raises(RunExistsError):
        run_store.create_run(run_id="r1", runnable="search", input={}, owner=RunOwner.new("second"))
    assert run_store.run_owner("r1") == first


LONG = "x" * 256
#: What no column holds, and the words of the refusal: every store refuses each the same way.
UNSTORABLE_RUNS: list[tuple[str, dict[str, Any], str]] = [
    ("NUL in the run id", {"run_id": "r\x001"}, "run id must not contain a NUL"),
    ("NUL in the runnable", {"runnable": "search\x00"}, "runnable name must not contain a NUL"),
    ("run id over 255 chars", {"run_id": LONG}, "run id is 256 characters long; at most 255"),
    ("runnable over 255 chars", {"runnable": LONG}, "runnable name is 256 characters long; at most 255"),
    ("Celery task id over 255", {"celery_task_id": LONG}, "Celery task id is 256 characters long"),
    ("parent id with a NUL", {"parent_run_id": "p\x00"}, "parent run id must not contain a NUL"),
    ("budget of 2**63", {"token_budget": 2**63}, "token_budget must be at most 9223372036854775807"),
    ("budget of 10**30", {"token_budget": 10**30}, "token_budget must be at most"),
    ("a negative budget", {"token_budget": -1}, "token_budget must be a non-negative int"),
]


@pytest.mark.parametrize(("case", "change", "words"), UNSTORABLE_RUNS, ids=[c[0] for c in UNSTORABLE_RUNS])
def test_a_value_no_column_holds_is_refused_before_the_database_sees_it(
    run_store: RunStore, case: str, change: dict[str, Any], words: str
) -> None:
    run = {"run_id": "r1", "runnable": "search", "input": {"q": 1}, **change}
    with pytest.raises(ValueError, match=words):
        run_store.create_run(**run)
    assert run_store.list_runs() == []


@pytest.mark.parametrize(
    "value", [{"q": "a\x00b"}, {"k\x00": 1}, ["ok", ["deep", "nul\x00"]]], ids=["value", "key", "nested"]
)
def test_json_with_a_nul_is_refused_by_every_store(run_store: RunStore, value: Any) -> None:
    with pytest.raises(StateNotSerializableError, match="NUL character, which no database stores"):
        run_store.create_run(run_id="r1", runnable="search", input=value)
    assert run_store.get_run("r1") is None
    run_store.create_run(run_id="r1", runnable="search", input=None)
    with pytest.raises(StateNotSerializableError, match="NUL"):
        run_store.finish_run("r1", status="succeeded", output=value)
    with pytest.raises(StateNotSerializableError, match="NUL"):
        run_store.save_checkpoint("r1", "", 1, value)


def test_an_error_is_recorded_whatever_its_text_holds(run_store: RunStore) -> None:
    run_store.create_run(run_id="r1", runnable="search", input=None)
    run_store.finish_run("r1", status="failed", error=ValueError("bad input 'a\x00b'" + "!" * 20_000))
    error = run_store.get_run("r1").error  # type: ignore[union-attr]
    assert error["type"] == "ValueError"
    assert error["message"].startswith("bad input 'a\\x00b'!!!")
    assert error["message"].endswith("... [10018 more chars cut]")


def test_counts_past_their_columns_are_refused(run_store: RunStore) -> None:
    run_store.create_run(run_id="r1", runnable="search", input=None)
    with pytest.raises(ValueError, match="input_tokens must be at most"):
        run_store.add_usage("r1", 2**63, 0)
    with pytest.raises(ValueError, match="iteration must be at most 2147483647"):
        run_store.save_checkpoint("r1", "", 2**31, {})
    with pytest.raises(ValueError, match="loop path is 1025 characters long"):
        run_store.save_checkpoint("r1", "p" * 1025, 1, {})


def test_ids_no_run_can_have_read_as_unknown(run_store: RunStore) -> None:
    for run_id in ("r\x001", LONG):
        assert run_store.get_run(run_id) is None
        assert run_store.events(run_id) == []
        assert run_store.is_cancel_requested(run_id) is False

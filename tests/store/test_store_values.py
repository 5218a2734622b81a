"""Values that cross the store's boundary: run records, JSON checks, the public surface."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop.orchestration.store as store_package
from agentloop.actions import StateNotSerializableError
from agentloop.orchestration.store import RunRecord, RunStatus, to_json_value

#: Text every database stores: a NUL character is refused by design (test_nul_characters_are_refused).
storable_text = st.text(alphabet=st.characters(exclude_characters="\x00"))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | storable_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(storable_text, children, max_size=4),
    max_leaves=12,
)
ids = st.text(min_size=1, max_size=20)
moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))
records = st.builds(
    RunRecord,
    id=ids,
    root_run_id=ids,
    parent_run_id=st.none() | ids,
    runnable=ids,
    path=st.text(max_size=30),
    status=st.sampled_from([status.value for status in RunStatus]),
    input=json_values,
    output=json_values,
    error=st.none() | st.fixed_dictionaries({"type": st.text(), "message": st.text()}),
    input_tokens=st.integers(min_value=0),
    output_tokens=st.integers(min_value=0),
    token_budget=st.none() | st.integers(min_value=0),
    created_at=moments,
    started_at=st.none() | moments,
    finished_at=st.none() | moments,
    celery_task_id=st.none() | ids,
    cancel_requested=st.booleans(),
)


@settings(max_examples=40)
@given(records)
def test_a_run_record_survives_a_json_round_trip(record: RunRecord) -> None:
    assert RunRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record


@settings(max_examples=40)
@given(json_values)
def test_json_values_are_accepted_and_come_back_equal(value: Any) -> None:
    assert to_json_value(value, what="value") == value


def test_a_run_record_is_frozen_and_keyword_only() -> None:
    record = RunRecord.from_dict(
        {
            "id": "r",
            "root_run_id": "r",
            "runnable": "x",
            "status": "pending",
            "created_at": "2025-01-01T00:00:00+00:00",
        }
    )
    assert record.created_at == datetime(2025, 1, 1, tzinfo=UTC)
    assert (record.path, record.input_tokens, record.cancel_requested) == ("", 0, False)
    assert not record.is_finished
    with pytest.raises(AttributeError):
        record.status = "running"  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunRecord("r")  # type: ignore[call-arg]


def test_a_run_record_needs_a_creation_time() -> None:
    with pytest.raises(ValueError, match="created_at"):
        RunRecord.from_dict({"id": "r"})


def test_record_timestamps_keep_their_offset_through_json() -> None:
    moment = datetime(2025, 5, 1, 12, tzinfo=UTC) + timedelta(microseconds=7)
    record = RunRecord.from_dict(
        {"id": "r", "root_run_id": "r", "runnable": "x", "status": "running", "created_at": moment}
    )
    assert RunRecord.from_dict(record.to_dict()).created_at == moment


def test_tuples_become_lists_and_cycles_are_refused() -> None:
    assert to_json_value({"pair": (1, (2, 3))}, what="state") == {"pair": [1, [2, 3]]}
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(StateNotSerializableError, match="contains itself"):
        to_json_value(cyclic, what="state")


def test_the_public_surface_is_sorted_and_importable() -> None:
    exported = store_package.__all__
    assert list(exported) == sorted(exported)  # plainly sorted, as tests/test_exports.py asks
    for name in exported:
        assert getattr(store_package, name) is not None, name


@pytest.mark.parametrize("value", ["a\x00b", {"k\x00": 1}, ["ok", {"deep": "\x00"}]])
def test_nul_characters_are_refused(value: Any) -> None:
    with pytest.raises(StateNotSerializableError, match="NUL character"):
        to_json_value(value, what="value")


#: Anything a progress event's mapping may hold, JSON or not: exact types, subclasses, NaN, NUL.
class _Label(str):
    pass


_any_item = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.builds(_Label, st.text())
    | st.tuples(st.integers())
    | st.just(set()),
    lambda children: st.lists(children, max_size=2) | st.dictionaries(st.text(), children, max_size=2),
    max_leaves=4,
)


@given(st.dictionaries(st.text() | st.integers(), _any_item, max_size=6))
@settings(max_examples=300, deadline=None)
def test_the_flat_fast_path_agrees_with_the_full_check_or_leaves_it_the_value(event: dict[Any, Any]) -> None:
    """``event_payloads``' fast path (``flat_json_copy``) gives exactly what ``to_json_value`` gives,
    or ``None`` so the full check decides: it never lets through what the full check refuses."""
    from agentloop.orchestration.store.json_values import flat_json_copy

    flat = flat_json_copy(event)
    if flat is None:
        return
    checked = to_json_value(event, what="event")
    assert flat == checked
    assert [type(value) for value in flat.values()] == [type(value) for value in checked.values()]
    for key, value in flat.items():  # a flat dict inside: its values' types too
        if isinstance(value, dict):
            assert [type(v) for v in value.values()] == [type(v) for v in checked[key].values()]


def test_an_event_with_flat_data_takes_the_fast_path_and_one_with_deeper_data_the_full_check() -> None:
    from agentloop.orchestration.store.json_values import flat_json_copy

    event = {"path": "a", "iteration": 2, "status": "progress", "message": "", "data": {}, "at": 1.5}
    assert flat_json_copy(event) == event
    done = {**event, "data": {"stopped_by": "complete", "n": 1}}  # a loop's last event
    assert flat_json_copy(done) == done and flat_json_copy(done)["data"] is not done["data"]  # type: ignore[index]
    assert flat_json_copy({**event, "data": {"k": {"deeper": 1}}}) is None
    assert flat_json_copy({**event, "data": {"k": [1]}}) is None
    assert flat_json_copy({**event, "data": {"k": "a\x00b"}}) is None
    assert flat_json_copy({**event, "message": "a\x00b"}) is None
    assert flat_json_copy({**event, "at": float("nan")}) is None
    assert flat_json_copy({**event, "path": _Label("a")}) is None

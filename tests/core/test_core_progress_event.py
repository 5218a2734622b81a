"""The progress event: a frozen value that crosses task boundaries as JSON."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.loops import ProgressEvent, ProgressStatus

json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

events = st.builds(
    ProgressEvent,
    run_id=st.text(max_size=12),
    path=st.text(max_size=20),
    runnable=st.text(max_size=12),
    iteration=st.integers(0, 10_000),
    max_iterations=st.integers(0, 10_000),
    phase=st.text(max_size=10),
    status=st.sampled_from(list(ProgressStatus)),
    message=st.text(max_size=30),
    data=st.dictionaries(st.text(max_size=8), json_data, max_size=4),
    at=st.floats(min_value=0, max_value=4e9, allow_nan=False),
)


def an_event(**changes: Any) -> ProgressEvent:
    fields: dict[str, Any] = {
        "run_id": "r1",
        "path": "pipeline/1/branch/3",
        "runnable": "Search",
        "iteration": 2,
        "max_iterations": 10,
        "phase": "act",
        "status": ProgressStatus.PROGRESS,
        "message": "step 2",
        "data": {"actions": ["search"], "nested": {"k": [1, 2]}},
        "at": 1700000000.5,
    }
    return ProgressEvent(**{**fields, **changes})


@settings(max_examples=40, deadline=None)
@given(event=events)
def test_any_event_round_trips_through_json_unchanged(event: ProgressEvent) -> None:
    assert ProgressEvent.from_json(event.to_json()) == event
    assert ProgressEvent.from_dict(json.loads(json.dumps(event.to_dict()))) == event


@settings(max_examples=40, deadline=None)
@given(data=st.dictionaries(st.text(max_size=8), json_data, max_size=4))
def test_the_data_of_an_event_comes_back_as_the_same_plain_json(data: dict[str, Any]) -> None:
    event = an_event(data=data)

    assert event.to_dict()["data"] == data
    assert json.loads(event.to_json())["data"] == data


def test_an_event_as_a_dict_has_exactly_the_fields_of_the_design() -> None:
    assert an_event().to_dict() == {
        "run_id": "r1",
        "path": "pipeline/1/branch/3",
        "runnable": "Search",
        "iteration": 2,
        "max_iterations": 10,
        "phase": "act",
        "status": "progress",
        "message": "step 2",
        "data": {"actions": ["search"], "nested": {"k": [1, 2]}},
        "at": 1700000000.5,
    }


def test_an_event_is_frozen_all_the_way_down() -> None:
    event = an_event()

    with pytest.raises(dataclasses.FrozenInstanceError):
        event.phase = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        event.data["new"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        event.data["nested"]["k"] = []  # type: ignore[index]
    assert isinstance(event.data["actions"], tuple)


def test_an_event_does_not_share_the_dict_it_was_built_from() -> None:
    data = {"actions": ["search"]}
    event = an_event(data=data)

    data["actions"].append("later")

    assert event.to_dict()["data"] == {"actions": ["search"]}


def test_an_event_accepts_its_status_as_a_string_and_rejects_unknown_ones() -> None:
    assert an_event(status="completed").status is ProgressStatus.COMPLETED
    with pytest.raises(ValueError):
        an_event(status="exploded")


def test_an_event_is_stamped_with_the_time_it_was_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agentloop.loops.progress.time.time", lambda: 123.25)
    fields = an_event().to_dict()
    del fields["at"]

    assert ProgressEvent.from_dict({**fields, "status": "started"}).at == 123.25

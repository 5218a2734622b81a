"""The guarantee matrix's checks on synthetic records: each holds on records that keep its
guarantee and names the run, the branch or the queue on records that break it (a check that
cannot fail would pass every cell)."""

from __future__ import annotations

from .invariants import (
    Call,
    Census,
    Rewrite,
    RunSeen,
    Violation,
    all_checks,
    budget_stops,
    no_repeated_call,
    no_rewrite,
    nothing_left,
    one_end,
    parked_once,
    usage_counted,
)


def run(tag: str = "r1", **values: object) -> RunSeen:
    fields: dict[str, object] = {"status": "succeeded", "ends": {"": 1, "branch/0": 1}, **values}
    return RunSeen(tag=tag, run_id=f"id-{tag}", **fields)  # type: ignore[arg-type]


def calls(tag: str, branch: str, iterations: list[int], tokens: int = 25) -> list[Call]:
    return [Call(tag=tag, branch=branch, iteration=i, tokens=tokens) for i in iterations]


def where(violations: list[Violation]) -> list[tuple[str, str, str]]:
    return [(v.invariant, v.run, v.where) for v in violations]


def test_one_end_holds_for_an_ended_run_with_one_terminal_event_per_path() -> None:
    assert one_end([run()]) == []


def test_one_end_names_an_open_run_a_missing_end_and_a_second_end() -> None:
    found = one_end(
        [
            run("open", status="running", ends={"": 0}),
            run("twice", ends={"": 1, "branch/3": 2}),
            run("silent", ends={"branch/0": 1}),
        ]
    )
    assert where(found) == [
        ("one end", "open", ""),
        ("one end", "open", ""),
        ("one end", "twice", "path 'branch/3'"),
        ("one end", "silent", ""),
    ]
    assert [v.what for v in found] == [
        "status running",
        "no terminal event",
        "2 terminal events",
        "no terminal event",
    ]


def test_no_rewrite_names_each_audit_row_with_its_run_and_branch() -> None:
    assert no_rewrite([], {}) == []
    found = no_rewrite(
        [
            Rewrite(table="runs", key="id-r1", change="status succeeded -> failed"),
            Rewrite(table="checkpoints", key="id-r2|branch/1", change="result 3 -> 0"),
        ],
        {"id-r1": "r1", "id-r2": "r2"},
    )
    assert where(found) == [("no rewrite", "r1", "runs"), ("no rewrite", "r2", "checkpoints 'branch/1'")]
    assert found[0].what == "status succeeded -> failed"


def test_no_repeated_call_holds_when_every_iteration_is_called_once() -> None:
    assert no_repeated_call(calls("r1", "0", [0, 1, 2]), {("r1", "0"): 3}) == []


def test_no_repeated_call_names_a_missing_and_a_repeated_iteration() -> None:
    found = no_repeated_call(calls("r1", "0", [0, 1, 1]), {("r1", "0"): 3})
    assert where(found) == [("no repeated call", "r1", "branch 0")] * 2
    assert [v.what for v in found] == [
        "iterations [2] made no model call",
        "iteration 1 called the model 2 times",
    ]


def test_after_a_strike_only_calls_from_before_the_checkpoint_or_of_a_finished_branch_are_repeats() -> None:
    made = calls("r1", "0", [0, 1, 2]) + calls("r1", "1", [0, 1])
    again = made + calls("r1", "0", [2]) + calls("r1", "1", [1, 2])  # resumed from their checkpoints
    before = {("r1", "0"): (False, 2), ("r1", "1"): (False, 1)}
    expected = {("r1", "0"): 3, ("r1", "1"): 3}
    assert no_repeated_call(again, expected, before=before, since=len(made)) == []
    rerun = made + calls("r1", "0", [0, 1, 2]) + calls("r1", "1", [2])
    found = no_repeated_call(rerun, expected, before={**before, ("r1", "1"): (True, 0)}, since=len(made))
    assert [(v.where, v.what) for v in found] == [
        ("branch 0", "had its checkpoint at 2, and called iterations [0, 1] again"),
        ("branch 1", "had finished, and called iterations [2] again"),
    ]


def test_usage_counted_holds_when_the_run_recorded_what_the_model_answered() -> None:
    assert usage_counted([run(input_tokens=60, output_tokens=15)], calls("r1", "0", [0, 1, 2])) == []


def test_usage_counted_names_a_run_whose_calls_are_missing_from_its_usage() -> None:
    found = usage_counted([run(input_tokens=0, output_tokens=0)], calls("r1", "0", [0, 1, 2]))
    assert [(v.run, v.what) for v in found] == [("r1", "0 tokens recorded, the model server answered 75")]


def test_after_a_strike_usage_lies_between_each_call_once_and_every_call() -> None:
    made = calls("r1", "0", [0, 1, 1, 2])  # iteration 1 repeated after a kill: 75 needed, 100 billed
    assert usage_counted([run(input_tokens=75)], made, exact=False) == []
    assert usage_counted([run(input_tokens=100)], made, exact=False) == []
    low, high = (usage_counted([run(input_tokens=n)], made, exact=False) for n in (50, 125))
    assert [v.what for v in low + high] == [
        "50 tokens recorded, outside [75, 100] (each call once .. every call)",
        "125 tokens recorded, outside [75, 100] (each call once .. every call)",
    ]


def test_budget_stops_holds_for_a_run_stopped_at_its_budget() -> None:
    assert budget_stops([run(status="budget_exceeded", token_budget=50)], calls("r1", "0", [0, 1, 2])) == []
    assert budget_stops([run(token_budget=100)], calls("r1", "0", [0, 1])) == []


def test_budget_stops_names_a_run_that_went_past_its_budget() -> None:
    found = budget_stops([run(status="succeeded", token_budget=50)], calls("r1", "0", [0, 1, 2]))
    assert [v.what for v in found] == [
        "the model answered 75 tokens of a 50 budget, and the run ended succeeded"
    ]
    spent = budget_stops([run(status="budget_exceeded", token_budget=20)], calls("r1", "0", [0, 1, 2, 3]))
    assert [v.what for v in spent] == ["100 tokens on a 20 budget: calls went on after it was spent"]


def test_nothing_left_holds_on_an_idle_broker_with_the_expected_dead_letters() -> None:
    assert (
        nothing_left(Census(queues={"agentloop": 0, "agentloop.dead": 1}, expected={"agentloop.dead": 1}))
        == []
    )


def test_nothing_left_names_each_queue_holding_queue_delivery_and_lock_left() -> None:
    found = nothing_left(
        Census(
            queues={"agentloop": 0, "agentloop.wire.3": 2, "agentloop.dead": 1},
            unacked=1,
            locks=["unacked_mutex"],
        )
    )
    assert [(v.where, v.what) for v in found] == [
        ("queue agentloop.dead", "1 messages, 0 expected"),
        ("queue agentloop.wire.3", "2 messages, 0 expected"),
        ("broker", "1 deliveries unacknowledged"),
        ("lock unacked_mutex", "still held"),
    ]


def test_nothing_left_names_a_message_missing_from_where_it_must_wait() -> None:
    found = nothing_left(Census(queues={"agentloop": 0}, expected={"agentloop.wire.2": 1}))
    assert [(v.where, v.what) for v in found] == [("queue agentloop.wire.2", "0 messages, 1 expected")]


def test_parked_once_names_a_message_parked_again_and_again() -> None:
    assert parked_once(1, 1) == []
    assert [v.what for v in parked_once(312, 1)] == ["312 parks of 1 too-new messages"]


def test_all_checks_runs_every_check() -> None:
    idle = Census(queues={"agentloop": 0})
    made = calls("r1", "0", [0, 1, 2])
    assert all_checks([run(input_tokens=75)], made, {("r1", "0"): 3}, [], idle) == []
    broken = all_checks(
        [run(status="running", ends={})],
        made + made[:1],
        {("r1", "0"): 3},
        [Rewrite(table="runs", key="id-r1", change="x")],
        Census(queues={"agentloop": 1}),
    )
    assert {v.invariant for v in broken} == {
        "one end",
        "no rewrite",
        "no repeated call",
        "usage counted",
        "nothing left",
    }

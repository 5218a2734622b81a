"""Token budgets at their edges, for the in-process meter and the run store's meter alike.

A budget spent exactly to its limit lets the call that spent it finish but starts no further
call; one token past it ends the step that passed it. ``check_budget`` / ``report_usage`` reach
the meter of the enclosing ``use_meter`` block only.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentloop.actions import (
    InMemoryUsageMeter,
    TokenBudgetExceededError,
    Usage,
    UsageMeter,
    check_budget,
    current_meter,
    report_usage,
    use_meter,
)
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.store.seams import StoreUsageMeter


def in_memory(budget: int | None) -> UsageMeter:
    return InMemoryUsageMeter(budget=budget)


def in_the_store(budget: int | None) -> UsageMeter:
    store = InMemoryRunStore()
    store.create_run(run_id="r", runnable="x", input=None, token_budget=budget)
    return StoreUsageMeter(store, "r")


METERS = [pytest.param(in_memory, id="in-memory"), pytest.param(in_the_store, id="run-store")]


@pytest.mark.parametrize("meter_of", METERS)
def test_a_budget_spent_exactly_lets_that_call_finish_and_starts_no_other(
    meter_of: Callable[[int | None], UsageMeter],
) -> None:
    meter = meter_of(10)
    meter.check()
    meter.record(Usage(input_tokens=6, output_tokens=4))  # exactly 10 of 10: no error yet
    with pytest.raises(TokenBudgetExceededError) as spent:
        meter.check()
    assert (spent.value.used, spent.value.budget) == (10, 10)


@pytest.mark.parametrize("meter_of", METERS)
def test_one_token_past_the_budget_ends_the_step_that_passed_it(
    meter_of: Callable[[int | None], UsageMeter],
) -> None:
    meter = meter_of(10)
    meter.record(Usage(input_tokens=6, output_tokens=3))
    meter.check()  # 9 of 10: another call may start
    with pytest.raises(TokenBudgetExceededError) as passed:
        meter.record(Usage(input_tokens=2, output_tokens=0))
    assert (passed.value.used, passed.value.budget) == (11, 10)
    assert passed.value.status == "budget_exceeded"


@pytest.mark.parametrize("meter_of", METERS)
def test_without_a_budget_usage_is_only_counted(meter_of: Callable[[int | None], UsageMeter]) -> None:
    meter = meter_of(None)
    for _ in range(3):
        meter.record(Usage(input_tokens=1_000_000, output_tokens=1))
        meter.check()


def test_a_budget_of_zero_starts_no_call() -> None:
    with pytest.raises(TokenBudgetExceededError):
        InMemoryUsageMeter(budget=0).check()


def test_the_run_store_meter_sums_what_every_task_of_the_run_reported() -> None:
    store = InMemoryRunStore()
    store.create_run(run_id="r", runnable="x", input=None, token_budget=10)
    first, second = StoreUsageMeter(store, "r"), StoreUsageMeter(store, "r")  # two tasks of one run
    first.record(Usage(input_tokens=5, output_tokens=0))
    second.record(Usage(input_tokens=5, output_tokens=0))
    with pytest.raises(TokenBudgetExceededError):
        first.check()
    record = store.get_run("r")
    assert record is not None and (record.input_tokens, record.output_tokens) == (10, 0)


def test_check_budget_and_report_usage_reach_the_meter_of_the_enclosing_block_only() -> None:
    outer, inner = InMemoryUsageMeter(budget=100), InMemoryUsageMeter(budget=5)
    check_budget()  # no meter: nothing to enforce
    report_usage(Usage(input_tokens=50, output_tokens=0))
    assert current_meter() is None
    with use_meter(outer):
        report_usage(Usage(input_tokens=3, output_tokens=0))
        with use_meter(inner):
            assert current_meter() is inner
            report_usage(Usage(input_tokens=5, output_tokens=0))
            with pytest.raises(TokenBudgetExceededError):
                check_budget()
        assert current_meter() is outer
        check_budget()
    assert outer.usage.total_tokens == 3 and inner.usage.total_tokens == 5
    assert current_meter() is None

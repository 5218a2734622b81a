"""Small exported helpers, tested by name: ``context_value``, ``maybe_await``, ``LaunchRequestError``,
``parse_crontab`` and ``is_private`` (no broker, no server)."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from agentloop import AgentLoopError, LaunchRequestError, ScheduleError, context_value, maybe_await
from orchestration.celery_adapter.schedule import parse_crontab
from orchestration.redaction import is_private
from orchestration.wire import LaunchRequest

# ----- context_value ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "context",
    [{"tool_store": "store", "limit": 0, "name": ""}, SimpleNamespace(tool_store="store", limit=0, name="")],
    ids=["mapping", "attributes"],
)
def test_context_value_reads_a_slot_of_a_mapping_or_an_object_alike(context: Any) -> None:
    assert context_value(context, "tool_store") == "store"
    assert context_value(context, "limit", 5) == 0  # a falsy value is a value
    assert context_value(context, "name", "x") == ""
    assert context_value(context, "missing") is None
    assert context_value(context, "missing", "fallback") == "fallback"


def test_context_value_gives_the_default_for_no_context_and_for_a_slot_set_to_none() -> None:
    assert context_value(None, "anything", 7) == 7
    assert context_value({"processor": None}, "processor", "offline") == "offline"
    assert context_value(SimpleNamespace(processor=None), "processor", "offline") == "offline"


# ----- maybe_await -------------------------------------------------------------------------------------


class Ready:
    """An awaitable that is not a coroutine."""

    def __await__(self) -> Generator[Any, None, str]:
        yield from asyncio.sleep(0).__await__()
        return "awaited"


async def test_maybe_await_awaits_what_is_awaitable_and_passes_anything_else_through() -> None:
    async def coroutine() -> int:
        return 3

    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    future.set_result("done")
    marker = object()

    assert await maybe_await(coroutine()) == 3
    assert await maybe_await(future) == "done"
    assert await maybe_await(Ready()) == "awaited"
    assert await maybe_await(marker) is marker
    assert await maybe_await(None) is None


# ----- LaunchRequestError -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"context": [1]}, "the context spec must be a JSON object, got list"),
        ({"context": "k=v"}, "the context spec must be a JSON object, got str"),
        ({"token_budget": -1}, "token_budget must be a non-negative integer, got -1"),
        ({"token_budget": True}, "token_budget must be a non-negative integer, got True"),
        ({"token_budget": "5"}, "token_budget must be a non-negative integer, got '5'"),
        ({"principal": 7}, "principal must be a non-empty string, got int"),
        ({"principal": "x" * 256}, "principal is 256 characters long; at most 255 allowed"),
    ],
)
def test_launch_arguments_the_contract_forbids_are_a_launch_request_error(
    arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(LaunchRequestError) as refused:
        LaunchRequest.parse(runnable="parity.count", **arguments)
    assert str(refused.value) == message
    assert isinstance(refused.value, AgentLoopError) and isinstance(refused.value, ValueError)


def test_launch_arguments_at_their_limits_are_accepted() -> None:
    request = LaunchRequest.parse(runnable="parity.count", input=[1], context=None, run_id=7, token_budget=0)
    expected = LaunchRequest(runnable="parity.count", input=[1], context={}, run_id="7", token_budget=0)
    assert request == expected
    assert request.to_kwargs() == {
        "runnable": "parity.count",
        "input": [1],
        "context": {},
        "run_id": "7",
        "token_budget": 0,
    }
    owned = LaunchRequest.parse(runnable="parity.count", principal="shop")
    assert owned.principal == "shop" and owned.to_kwargs()["principal"] == "shop"
    assert LaunchRequest.parse(**owned.to_kwargs()) == owned


# ----- parse_crontab ------------------------------------------------------------------------------------


def test_parse_crontab_reads_minute_hour_day_month_weekday_in_that_order() -> None:
    entry = parse_crontab("30 2 1,15 6 1-5")
    assert (entry.minute, entry.hour) == ({30}, {2})
    assert (entry.day_of_month, entry.month_of_year, entry.day_of_week) == ({1, 15}, {6}, {1, 2, 3, 4, 5})


def test_a_parsed_crontab_is_due_on_its_weekdays_only() -> None:
    entry = parse_crontab("0 3 * * 1-5")  # 03:00 UTC, Monday to Friday
    friday, saturday, monday = (datetime(2026, 11, day, 3, 0, tzinfo=UTC) for day in (27, 28, 30))
    thursday = datetime(2026, 11, 26, 3, 0, tzinfo=UTC)

    entry.nowfun = lambda: friday
    assert entry.is_due(thursday).is_due is True
    entry.nowfun = lambda: saturday
    assert entry.is_due(friday).is_due is False
    entry.nowfun = lambda: monday
    assert entry.is_due(friday).is_due is True


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("0 3 * *", "a crontab needs 5 fields"),
        ("0 3 * * * *", "a crontab needs 5 fields"),
        ("", "a crontab needs 5 fields"),
        ("61 3 * * *", "invalid crontab '61 3 \\* \\* \\*'"),
        ("0 3 * * funday", "invalid crontab"),
    ],
)
def test_a_crontab_that_cannot_be_used_is_a_schedule_error(expression: str, problem: str) -> None:
    with pytest.raises(ScheduleError, match=problem):
        parse_crontab(expression)


# ----- is_private ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "private"),
    [
        ("agentloop.launch", True),
        ("agentloop.batch_chunk", True),
        ("agentloop.", True),
        ("agentloop", False),
        ("agentloopx.launch", False),
        ("other.agentloop.launch", False),
        ("Agentloop.launch", False),
        ("", False),
        (None, False),
        (b"agentloop.launch", False),
    ],
)
def test_only_task_names_under_the_agentloop_prefix_are_private(name: object, private: bool) -> None:
    assert is_private(name) is private

"""The JSON text of the store's parameters on PostgreSQL (``store/json_values.json_text``): orjson's
where it says what the standard library says, the standard library's everywhere else, so a value
is stored as it was before orjson wrote it, and a NaN is refused, never stored as ``null``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from sqlalchemy import Engine, bindparam, column, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.exc import DataError

from agentloop.orchestration.store import create_engine_for
from agentloop.orchestration.store.direct import run_fixed
from agentloop.orchestration.store.json_values import json_text
from tests.services.postgres import private_database

EVENT = {"run_id": "r", "path": "branch/7", "phase": "iteration", "iteration": 2, "at": 1.5, "data": {}}


def test_a_value_orjson_writes_as_the_standard_library_does_is_orjsons() -> None:
    batch = [{"payload": EVENT, "path": "branch/7", "status": "progress", "iteration": 2}] * 3
    for value in (EVENT, batch, "é ü 字", [1.0, 0.1, -2.5e300, 12345678901234567]):
        written = json_text(value)
        assert written == orjson.dumps(value) and json.loads(written) == json.loads(json.dumps(value))


@pytest.mark.parametrize(
    "value",
    [
        2**70,  # past 64 bits: orjson refuses it
        {1: "a"},  # a key that is not a string: the standard library writes "1"
        "\ud800",  # a lone surrogate
        {"score": float("nan")},  # orjson would write null
        [float("inf")],
        {"kept": None},  # a null orjson wrote may be a NaN's: the standard library says which
    ],
)
def test_what_orjson_would_write_otherwise_is_the_standard_librarys(value: Any) -> None:
    assert json_text(value) == json.dumps(value)


@pytest.fixture
def engine(pg_admin_url: str) -> Iterator[Engine]:
    with private_database(pg_admin_url) as url:
        one = create_engine_for(url)
        yield one
        one.dispose()


ECHO = (
    text("SELECT CAST(:value AS jsonb) AS value")
    .bindparams(bindparam("value", type_=JSONB()))
    .columns(column("value", JSONB()))
)


@pytest.mark.integration
def test_on_postgresql_values_come_back_as_they_went_and_a_nan_is_refused(engine: Engine) -> None:
    assert engine.dialect._json_serializer is json_text  # type: ignore[attr-defined]  # psycopg's
    for value in (EVENT, 2**70, {"kept": None, "n": [1, 2.5]}, "é"):
        ((back,),) = run_fixed(engine, ECHO, {"value": value})
        assert back == value
    with pytest.raises(DataError, match="invalid input syntax for type json"):
        run_fixed(engine, ECHO, {"value": {"score": float("nan")}})  # as before: never stored as null

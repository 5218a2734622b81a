"""A PostgreSQL database that goes silent never holds a task forever: every engine connects with a
connect timeout, TCP keepalives and a TCP user timeout (libpq options)."""

from __future__ import annotations

import pytest

from agentloop.orchestration.store.database import POSTGRES_CONNECT_ARGS, create_engine_for

pytestmark = pytest.mark.integration


def test_every_postgres_connection_carries_the_timeouts(pg_admin_url: str) -> None:
    engine = create_engine_for(pg_admin_url)
    try:
        with engine.connect() as connection:
            parameters = connection.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
    finally:
        engine.dispose()
    assert {name: parameters.get(name) for name in POSTGRES_CONNECT_ARGS} == {
        name: str(value) for name, value in POSTGRES_CONNECT_ARGS.items()
    }


def test_options_given_by_the_caller_win(pg_admin_url: str) -> None:
    engine = create_engine_for(pg_admin_url, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as connection:
            parameters = connection.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
    finally:
        engine.dispose()
    assert parameters["connect_timeout"] == "3" and parameters["keepalives_idle"] == "10"

"""Fixtures that run each store test on SQLite, on PostgreSQL and, where it fits, in memory.

PostgreSQL comes from :mod:`tests.services.postgres`: one private
database per session, migrated once and truncated before each test. Its
parameters are marked ``integration``; without a server they skip (fail on CI).
SQLite tests each get a copy of a database file migrated once per session.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import Engine

from agentloop.orchestration.store import (
    InMemoryRunStore,
    InMemoryToolStore,
    RunStore,
    SqlRunStore,
    SqlToolStore,
    ToolStore,
    create_engine_for,
    upgrade_database,
)
from agentloop.orchestration.store.tables import metadata
from tests.services.postgres import (
    PostgresUnavailableError,
    postgres_server,
    private_database,
    skip_or_fail,
)

SQL_BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)]
ALL_BACKENDS = ["memory", *SQL_BACKENDS]


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """An admin URL on a PostgreSQL server (existing, or a private cluster)."""
    with ExitStack() as stack:
        try:
            url = stack.enter_context(postgres_server())
        except PostgresUnavailableError as error:
            skip_or_fail(str(error))
        yield url


@pytest.fixture(scope="session")
def pg_engine(pg_admin_url: str) -> Iterator[Engine]:
    """An engine on this session's private, migrated PostgreSQL database."""
    with private_database(pg_admin_url) as url:
        upgrade_database(url)
        engine = create_engine_for(url)
        yield engine
        engine.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once, copied for each test."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.sqlite3"
    upgrade_database(f"sqlite:///{path}")
    return path


def _engine(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Engine:
    if backend == "postgresql":
        engine: Engine = request.getfixturevalue("pg_engine")
        with engine.begin() as connection:  # DELETE beats TRUNCATE on tables this small
            for table in metadata.sorted_tables:
                connection.execute(table.delete())
        return engine
    path = tmp_path / "store.sqlite3"
    shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
    engine = create_engine_for(f"sqlite:///{path}")
    request.addfinalizer(engine.dispose)
    return engine


@pytest.fixture
def fresh_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Engine]:
    """Engines on empty, migrated databases of a backend (``"sqlite"``, ``"postgresql"``), a new
    one each call (a Hypothesis test's examples each start empty; PostgreSQL's is emptied)."""

    def make(backend: str) -> Engine:
        folder = tmp_path / f"db-{uuid.uuid4().hex}"
        folder.mkdir()
        return _engine(request, backend, folder)

    return make


@pytest.fixture(params=SQL_BACKENDS)
def sql_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    """An engine on an empty, migrated database (SQLite file or private PostgreSQL)."""
    return _engine(request, request.param, tmp_path)


@pytest.fixture
def sql_url(sql_engine: Engine) -> str:
    """The URL of :func:`sql_engine`'s database, password included (for other processes)."""
    return sql_engine.url.render_as_string(hide_password=False)


@pytest.fixture(params=ALL_BACKENDS)
def run_store(request: pytest.FixtureRequest, tmp_path: Path) -> RunStore:
    """Each run store implementation on an empty database."""
    if request.param == "memory":
        return InMemoryRunStore()
    return SqlRunStore(_engine(request, request.param, tmp_path))


@pytest.fixture(params=ALL_BACKENDS)
def tool_store(request: pytest.FixtureRequest, tmp_path: Path) -> ToolStore:
    """Each tool store implementation on an empty database."""
    if request.param == "memory":
        return InMemoryToolStore()
    return SqlToolStore(_engine(request, request.param, tmp_path))


@pytest.fixture(params=SQL_BACKENDS)
def blank_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a database that was never migrated (a new SQLite file or a new PostgreSQL database)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'blank.sqlite3'}"
        return
    with private_database(request.getfixturevalue("pg_admin_url")) as url:
        yield url

"""The private-PostgreSQL helper tests rely on: found or started, isolated, cleaned up, loud on CI."""

from __future__ import annotations

import shutil

import psycopg
import pytest

from tests.services.postgres import (
    ENV_URL,
    PostgresUnavailableError,
    connect_kwargs,
    postgres_server,
    postgres_url_fixture,
    private_cluster,
    private_database,
    skip_or_fail,
)


def _database_names(admin_url: str) -> set[str]:
    with psycopg.connect(**connect_kwargs(admin_url)) as connection:
        return {row[0] for row in connection.execute("SELECT datname FROM pg_database")}


@pytest.mark.integration
def test_a_private_database_is_created_and_dropped_even_while_in_use(pg_admin_url: str) -> None:
    with private_database(pg_admin_url) as url:
        name = url.rsplit("/", 1)[1]
        assert name.startswith("agentloop_test_")
        assert name in _database_names(pg_admin_url)
        lingering = psycopg.connect(**connect_kwargs(url))
    try:
        assert name not in _database_names(pg_admin_url)
    finally:
        lingering.close()


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("initdb") is None, reason="initdb is not on PATH")
def test_a_private_cluster_starts_on_a_free_port_and_is_removed_after() -> None:
    with private_cluster() as admin_url, private_database(admin_url) as url:
        assert ":5432/" not in admin_url
        with psycopg.connect(**connect_kwargs(url)) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(**connect_kwargs(admin_url), connect_timeout=2)


def test_an_unusable_explicit_server_url_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, "postgresql://nobody@127.0.0.1:1/postgres")
    with pytest.raises(PostgresUnavailableError, match=ENV_URL), postgres_server():
        pass


def test_a_missing_server_skips_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="PostgreSQL unavailable: no server"):
        skip_or_fail("no server")


def test_a_missing_server_fails_on_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="required on CI"):
        skip_or_fail("no server")


def test_the_fixture_factory_makes_a_fixture() -> None:
    fixture = postgres_url_fixture(scope="module")
    assert "postgres_url" in repr(fixture)

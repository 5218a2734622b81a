"""Migrations go up and down on both databases, and the tables agree with them."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text

from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.store import (
    create_engine_for,
    current_revision,
    database_url,
    downgrade_database,
    normalize_url,
    open_store,
    upgrade_database,
)
from agentloop.orchestration.store.migrate import alembic_config
from agentloop.orchestration.store.tables import metadata
from tests.services.postgres import private_database

TABLES = {
    "ai_tools",
    "runs",
    "run_events",
    "checkpoints",
    "human_waits",
    "run_recordings",
    "concurrency_slots",
}
HEAD = "0016"


def _tables(url: str) -> set[str]:
    engine = create_engine_for(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _indexes(url: str, table: str) -> set[str]:
    engine = create_engine_for(url)
    try:
        return {index["name"] for index in inspect(engine).get_indexes(table) if index["name"]}
    finally:
        engine.dispose()


def _columns(url: str, table: str) -> set[str]:
    engine = create_engine_for(url)
    try:
        return {column["name"] for column in inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


def test_migrations_go_up_to_head_down_to_base_and_up_again(blank_database_url: str) -> None:
    assert current_revision(blank_database_url) is None
    assert _tables(blank_database_url) == set()

    upgrade_database(blank_database_url)
    assert current_revision(blank_database_url) == HEAD
    assert _tables(blank_database_url) == TABLES

    volume = {"ix_runs_created_at_id", "ix_runs_runnable_created_at", "ix_runs_finished_at"}
    assert volume <= _indexes(blank_database_url, "runs")
    downgrade_database(blank_database_url, "0007")
    assert volume.isdisjoint(_indexes(blank_database_url, "runs"))
    assert "ix_runs_created_at" in _indexes(blank_database_url, "runs")
    upgrade_database(blank_database_url)
    assert volume <= _indexes(blank_database_url, "runs")
    assert "ix_runs_created_at" not in _indexes(blank_database_url, "runs")

    downgrade_database(blank_database_url, "0005")
    assert "principal" not in _columns(blank_database_url, "runs")
    assert "ix_runs_principal_created_at" not in _indexes(blank_database_url, "runs")
    upgrade_database(blank_database_url)
    assert "principal" in _columns(blank_database_url, "runs")
    assert "ix_runs_principal_created_at" in _indexes(blank_database_url, "runs")

    downgrade_database(blank_database_url, "0002")
    assert {"launch_digest", "owner_token"}.isdisjoint(_columns(blank_database_url, "runs"))
    downgrade_database(blank_database_url, "0001")
    assert current_revision(blank_database_url) == "0001"
    assert "ix_runs_parent_run_id_status" not in _indexes(blank_database_url, "runs")
    upgrade_database(blank_database_url)
    assert "ix_runs_parent_run_id_status" in _indexes(blank_database_url, "runs")

    downgrade_database(blank_database_url, "base")
    assert current_revision(blank_database_url) is None
    assert _tables(blank_database_url) == set()

    upgrade_database(blank_database_url, "head")
    assert _tables(blank_database_url) == TABLES


def test_upgrading_an_up_to_date_database_changes_nothing(blank_database_url: str) -> None:
    upgrade_database(blank_database_url)
    upgrade_database(blank_database_url)
    assert current_revision(blank_database_url) == HEAD


def test_the_tables_match_the_migrated_schema_exactly(sql_engine: Engine) -> None:
    with sql_engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []


def test_migrations_render_offline_sql_for_postgresql() -> None:
    buffer = io.StringIO()
    config = alembic_config()
    config.set_main_option("sqlalchemy.url", "postgresql://user@localhost/agentloop")
    config.output_buffer = buffer
    command.upgrade(config, "head", sql=True)
    sql = buffer.getvalue()
    assert "CREATE TABLE runs" in sql
    assert "JSONB" in sql


def test_open_store_migrates_a_new_database_by_itself(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nested' / 'new.sqlite3'}"
    run_store, tool_store = open_store(url)
    try:
        assert current_revision(url) == HEAD
        assert run_store.get_run("nothing") is None
        assert tool_store.list() == []
    finally:
        run_store.engine.dispose()


def test_database_url_defaults_to_a_sqlite_file_under_agentloop_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    url = database_url(load_settings({"AGENTLOOP_HOME": str(home)}))
    assert url == f"sqlite:///{home.resolve() / 'agentloop.sqlite3'}"
    assert home.is_dir()


def test_database_url_defaults_to_the_per_user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    expected = f"sqlite:///{tmp_path.resolve() / 'data' / 'agentloop' / 'agentloop.sqlite3'}"
    assert database_url(load_settings({})) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@db:5432/app", "postgresql+psycopg://u:p@db:5432/app"),
        ("postgres://u@db/app", "postgresql+psycopg://u@db/app"),
        ("postgresql+psycopg://u@db/app", "postgresql+psycopg://u@db/app"),
        ("sqlite:////tmp/x.sqlite3", "sqlite:////tmp/x.sqlite3"),
    ],
)
def test_database_url_rewrites_postgresql_urls_to_psycopg(given: str, expected: str) -> None:
    assert normalize_url(given) == expected
    assert database_url(load_settings({"DATABASE_URL": given})) == expected


def test_sqlite_files_use_wal_and_a_busy_timeout(tmp_path: Path) -> None:
    engine = create_engine_for(f"sqlite:///{tmp_path / 'wal.sqlite3'}")
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 30_000
    finally:
        engine.dispose()


def test_an_in_memory_sqlite_store_is_one_database_for_every_thread() -> None:
    run_store, _ = open_store("sqlite://")
    try:
        run_store.create_run(run_id="r1", runnable="search", input={})
        seen: list[object] = []
        reader = threading.Thread(target=lambda: seen.append(run_store.get_run("r1")))
        reader.start()
        reader.join()
        assert [getattr(record, "id", None) for record in seen] == ["r1"]
    finally:
        run_store.engine.dispose()


@pytest.mark.integration
def test_workers_migrating_one_new_postgresql_database_together_take_turns(pg_admin_url: str) -> None:
    with private_database(pg_admin_url) as url:
        _migrate_from_four_threads(url)


def _migrate_from_four_threads(blank_database_url: str) -> None:
    errors: list[BaseException] = []

    def migrate() -> None:
        try:
            upgrade_database(blank_database_url)
        except BaseException as error:  # collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=migrate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert current_revision(blank_database_url) == HEAD
    assert _tables(blank_database_url) == TABLES

"""Running the store's Alembic migrations from code.

No ``alembic.ini`` is needed: the configuration is built here, pointing at the
``migrations`` folder inside this package, and the migration runs over an
engine made by :func:`~agentloop.orchestration.store.database.create_engine_for`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, text

from agentloop.orchestration.store.database import create_engine_for

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
HEAD_REVISION = "head"
#: The PostgreSQL advisory lock that serialises concurrent migrations of one database.
MIGRATION_LOCK_KEY = 0x6167_656E_746C_6F70 & 0x7FFF_FFFF_FFFF_FFFF


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration for the store's migrations, over ``connection`` when given."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@contextmanager
def _connection(target: str | Engine | None) -> Iterator[Connection]:
    engine = target if isinstance(target, Engine) else create_engine_for(target)
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                # Workers starting together on a new database migrate one at a time:
                # the lock lasts until this transaction (the migration) commits.
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            yield connection
    finally:
        if not isinstance(target, Engine):
            engine.dispose()


def upgrade_database(url: str | Engine | None = None, revision: str = HEAD_REVISION) -> None:
    """Migrate the database at ``url`` (default ``DATABASE_URL`` / SQLite) up to ``revision``."""
    with _connection(url) as connection:
        command.upgrade(alembic_config(connection), revision)


def downgrade_database(url: str | Engine | None, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``"base"`` drops every table)."""
    with _connection(url) as connection:
        command.downgrade(alembic_config(connection), revision)


def current_revision(url: str | Engine | None = None) -> str | None:
    """The revision the database at ``url`` is at; ``None`` when it was never migrated."""
    with _connection(url) as connection:
        return MigrationContext.configure(connection).get_current_revision()

"""Alembic environment of the store.

Used programmatically by :mod:`agentloop.orchestration.store.migrate` (which hands over an
open connection in ``config.attributes["connection"]``) and by the Alembic CLI
through ``orchestration/store/alembic.ini`` (which reads ``DATABASE_URL``).
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from agentloop.orchestration.store.database import create_engine_for, database_url, normalize_url
from agentloop.orchestration.store.tables import metadata

config = context.config
target_metadata = metadata

if config.config_file_name is not None:  # the CLI: log as alembic.ini says
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    configured = config.get_main_option("sqlalchemy.url")
    return normalize_url(configured) if configured else database_url()


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Emit the migration SQL without a database (``alembic upgrade head --sql``)."""
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate over the given connection, or over a fresh engine for the configured URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine_for(_url())
    try:
        with engine.connect() as fresh:
            _run(fresh)
            fresh.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

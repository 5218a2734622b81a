"""Alembic migrations of the store (run them with :func:`orchestration.store.upgrade_database`)."""

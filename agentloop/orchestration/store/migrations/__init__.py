"""Alembic migrations of the store (run them with :func:`agentloop.orchestration.store.upgrade_database`)."""

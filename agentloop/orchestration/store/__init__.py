"""Persistence: runs, progress events, checkpoints and tool schemas.

SQLAlchemy 2 Core on a SQLite file by default, PostgreSQL through
``DATABASE_URL``, schema managed by the Alembic migrations in ``migrations/``.
JSON is the only storage format; nothing is pickled.

Typical use::

    run_store, tool_store = open_store()          # migrates to head first
    run_store.create_run(run_id="r1", runnable="search", input={"q": "..."})

A run id names one run: creating it again raises :class:`RunExistsError`, and a
run that has ended is never rewritten (:class:`RunAlreadyEndedError`). The SQL
store rides out a database that is briefly away (:class:`StoreRetry`, then
:class:`StoreUnavailableError`). These errors, like every error of the
infrastructure, are defined in ``orchestration/errors.py``.

:class:`RunStore` and :class:`ToolStore` are the protocols; each SQL store has
an in-memory twin (:class:`InMemoryRunStore`, :class:`InMemoryToolStore`) for
tests and offline runs.
"""

from agentloop.orchestration.store.database import create_engine_for, database_url, normalize_url
from agentloop.orchestration.store.json_values import JsonValue, to_json_value
from agentloop.orchestration.store.memory import InMemoryRunStore
from agentloop.orchestration.store.migrate import current_revision, downgrade_database, upgrade_database
from agentloop.orchestration.store.open import open_store
from agentloop.orchestration.store.protocol import (
    CHILD_SUMS,
    OPEN_STATUSES,
    TERMINAL_STATUSES,
    LoopRecord,
    RunOwner,
    RunRecord,
    RunStatus,
    RunStore,
    StartedLoop,
)
from agentloop.orchestration.store.retry import StoreRetry
from agentloop.orchestration.store.sql import SqlRunStore
from agentloop.orchestration.store.tool_store import (
    InMemoryToolStore,
    SqlToolStore,
    ToolRecord,
    ToolStore,
    validate_tool_payload,
)

__all__ = [
    "CHILD_SUMS",
    "InMemoryRunStore",
    "InMemoryToolStore",
    "JsonValue",
    "LoopRecord",
    "OPEN_STATUSES",
    "RunOwner",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "SqlRunStore",
    "SqlToolStore",
    "StartedLoop",
    "StoreRetry",
    "TERMINAL_STATUSES",
    "ToolRecord",
    "ToolStore",
    "create_engine_for",
    "current_revision",
    "database_url",
    "downgrade_database",
    "normalize_url",
    "open_store",
    "to_json_value",
    "upgrade_database",
    "validate_tool_payload",
]

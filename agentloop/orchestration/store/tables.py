"""The tables of the store, as SQLAlchemy Core tables on one :data:`metadata`.

Seven tables, the same on SQLite and PostgreSQL (JSON columns become ``JSONB``
on PostgreSQL; nothing is ever pickled):

``ai_tools``     tool schema payloads by id
``runs``         one row per run (a root run and every child task's run)
``run_events``   progress events, keyed by the ROOT run id; ``id`` is the order
``checkpoints``  the latest checkpoint of each loop, one row per (run, path)
``human_waits``  the questions a run asked a person, one row per (run, path, key)
``concurrency_slots`` each keyed run's place under its concurrency key: waiting, holding a slot,
                 refused or cancelled to make room (``concurrency.py``), one row per root run,
                 and each branch task's place in its key's branch slots (``kind`` 'branch')
``run_recordings`` what a recorded run's steps got (model turns, tool results, answers, cache
                 hits), one row per place (root run, path, iteration, kind, seq)

There are deliberately no foreign keys: workers write events and checkpoints
for runs that another process creates, in whatever order messages arrive.
The migrations in ``migrations/versions/`` create exactly these tables; a test
checks that the two agree.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

EVENT_ID_TYPE = BigInteger().with_variant(Integer, "sqlite")
"""``BIGINT`` identity on PostgreSQL; on SQLite only ``INTEGER PRIMARY KEY`` autoincrements."""


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every database.

    PostgreSQL stores ``timestamptz``; SQLite stores text without an offset, so
    values are converted to UTC on the way in and marked UTC on the way out.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given where a timezone-aware one is required")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def json_type() -> JSON:
    """Portable JSON column type: ``JSONB`` on PostgreSQL, ``JSON`` elsewhere; ``None`` is SQL NULL."""
    return JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


metadata = MetaData(naming_convention=NAMING_CONVENTION)
"""Every table of the store (what the migrations create; Alembic compares against it)."""

ai_tools = Table(
    "ai_tools",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("payload", json_type(), nullable=False),
    Column("created_at", UtcDateTime(), nullable=False, default=utcnow),
    Column("updated_at", UtcDateTime(), nullable=False, default=utcnow, onupdate=utcnow),
)
"""A tool schema payload ``{"name", "description", "parameters"}`` stored by id."""

runs = Table(
    "runs",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("root_run_id", String(255), nullable=False, index=True),
    Column("parent_run_id", String(255)),
    Column("runnable", String(255), nullable=False),
    Column("path", Text, nullable=False, default=""),
    Column("status", String(32), nullable=False, default="pending"),
    Column("input", json_type()),
    Column("output", json_type()),
    Column("error", json_type()),
    Column("input_tokens", BigInteger, nullable=False, default=0, server_default="0"),
    Column("output_tokens", BigInteger, nullable=False, default=0, server_default="0"),
    # Step-cache use (``orchestration/runtime/step_cache.py``), summed like the tokens (migration 0005).
    Column("cache_hits", BigInteger, nullable=False, default=0, server_default="0"),
    Column("cache_misses", BigInteger, nullable=False, default=0, server_default="0"),
    Column("tokens_saved", BigInteger, nullable=False, default=0, server_default="0"),
    # MCP tool calls made (``orchestration/mcp/tools.py``), summed like the tokens (migration 0014).
    Column("tool_calls", BigInteger, nullable=False, default=0, server_default="0"),
    Column("token_budget", BigInteger),
    Column("created_at", UtcDateTime(), nullable=False, default=utcnow),
    Column("started_at", UtcDateTime()),
    Column("finished_at", UtcDateTime(), index=True),
    Column("celery_task_id", String(255)),
    Column("cancel_requested", Boolean, nullable=False, default=False, server_default=false()),
    # Who may end the run (``RunOwner``): the digest of the launch message that created it, and
    # the secret token only that launch's tasks carry. Not part of ``RunRecord``.
    Column("launch_digest", String(64)),
    Column("owner_token", String(64)),
    # Whose run it is over HTTP: the principal of the token that started it (migration 0006);
    # ``None`` for a run started another way (CLI, Celery clients, beat).
    Column("principal", String(255)),
    # How a run that returned ended: "complete", or "bound" when a loop of it hit its
    # max_iterations first (migration 0010); NULL for a run that did not return.
    Column("stopped_by", String(32)),
    # The recorded run and place a forked run went on from: {"run_id", "path", "iteration"}
    # (migration 0012); NULL for any other run.
    Column("forked_from", json_type()),
    Index("ix_runs_status_created_at", "status", "created_at"),
    Index("ix_runs_parent_run_id_status", "parent_run_id", "status"),
    Index("ix_runs_runnable_status", "runnable", "status"),
    Index("ix_runs_principal_created_at", "principal", "created_at"),
    # The runs list, newest first, and one runnable's (migration 0009).
    Index("ix_runs_created_at_id", "created_at", "id"),
    Index("ix_runs_runnable_created_at", "runnable", "created_at"),
)
"""One run: a whole workflow (root run, ``root_run_id == id``) or one task of it."""

run_events = Table(
    "run_events",
    metadata,
    Column("id", EVENT_ID_TYPE, primary_key=True, autoincrement=True),
    Column("run_id", String(255), nullable=False),
    Column("path", Text, nullable=False, default=""),
    Column("status", String(32), nullable=False, default=""),
    Column("phase", Text, nullable=False, default=""),
    Column("iteration", Integer),
    Column("payload", json_type(), nullable=False),
    Column("created_at", UtcDateTime(), nullable=False, default=utcnow),
    Index("ix_run_events_run_id_id", "run_id", "id"),
)
"""One progress event of a workflow; ``run_id`` is the root run id, ``id`` the order."""

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("run_id", String(255), primary_key=True),
    Column("path", String(1024), primary_key=True),
    Column("iteration", Integer),
    Column("state", json_type()),
    Column("finished", Boolean, nullable=False, default=False, server_default=false()),
    Column("result", json_type()),
    Column("updated_at", UtcDateTime(), nullable=False, default=utcnow, onupdate=utcnow),
    # How many tasks started the loop since its last checkpoint (``RunStore.start_loops``,
    # migration 0011): the delivery limit on every broker.
    Column("deliveries", Integer, nullable=False, default=0, server_default="0"),
)
"""The latest checkpoint of one loop (``iteration`` NULL: none yet), whether it finished, and how
often it was started without progress (``deliveries``)."""

human_waits = Table(
    "human_waits",
    metadata,
    Column("run_id", String(255), primary_key=True),
    Column("path", String(1024), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("status", String(32), nullable=False),
    Column("question", json_type(), nullable=False),
    Column("answer", json_type()),
    Column("message", json_type()),
    Column("expires_at", UtcDateTime()),
    Column("created_at", UtcDateTime(), nullable=False, default=utcnow),
    Column("answered_at", UtcDateTime()),
    Column("resumed_at", UtcDateTime()),
)
"""One question a run's step asked a person (``orchestration/celery_adapter/pause.py``,
``orchestration/store/waits.py``): ``pending``, ``answered``
or ``expired``, with the answer and the message that resumes the paused task (``resumed_at``: when
that message was sent again; NULL on a settled wait, it still has to be)."""

run_recordings = Table(
    "run_recordings",
    metadata,
    Column("run_id", String(255), primary_key=True),
    Column("path", String(1024), primary_key=True),
    Column("iteration", Integer, primary_key=True),
    Column("kind", String(32), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("data", json_type(), nullable=False),
    Column("recorded_at", UtcDateTime(), nullable=False, default=utcnow),
)
"""One entry of a recorded run (``actions/recording.py``, ``orchestration/store/recordings.py``),
under the root run id (migration 0008)."""

concurrency_slots = Table(
    "concurrency_slots",
    metadata,
    # A root run's id, or a branch's slot's name (``concurrency.branch_holder``: run id and path).
    Column("run_id", String(255), primary_key=True),
    # "run" (a root run's place) or "branch" (a branch task's, in its key's line of branch
    # slots): a key has a line of each kind (migration 0016).
    Column("kind", String(16), nullable=False, default="run", server_default="run"),
    Column("key", String(255), nullable=False),
    # "waiting", "held", "refused", "evicted" (cancelled to make room) or "done" (given up)
    Column("state", String(16), nullable=False),
    Column("queued_at", UtcDateTime(), nullable=False, default=utcnow),
    # A slot or a place in line counts only until then: a run whose worker and message are gone
    # gives it up without anyone releasing it (migration 0013). A row given up ("done") holds
    # when it was; retention deletes the rows whose lease ended long ago (migration 0016).
    Column("lease_until", UtcDateTime(), nullable=False),
    Column("waits", Integer, nullable=False, default=0, server_default="0"),
    # The key's weight in the fair share and its runnable's limit, as the run declared them: what
    # a process that frees a slot reads to know how many waiters to wake (migration 0015).
    Column("weight", Integer, nullable=False, default=1, server_default="1"),
    Column("bound", Integer, nullable=True),
    # A waiting run's parked launch message (JSON: task, args, kwargs, task id, priority), sent
    # again by whoever frees a slot for it; when it was last sent so; which copy of the message
    # holds the slot (the wake header's token) and which copy is its backstop, due when.
    Column("message", Text, nullable=True),
    Column("woken_at", UtcDateTime(), nullable=True),
    Column("holder", String(64), nullable=True),
    Column("backstop", String(64), nullable=True),
    Column("backstop_due", UtcDateTime(), nullable=True),
    Index("ix_concurrency_slots_kind_key_state_queued_at", "kind", "key", "state", "queued_at"),
    Index("ix_concurrency_slots_lease_until", "lease_until"),
)
"""A keyed run's place under its key (``concurrency.py``): what the limits and fair shares count."""

"""The tables of the store, as a typed SQLAlchemy 2 ORM.

Four tables, the same on SQLite and PostgreSQL (JSON columns become ``JSONB``
on PostgreSQL; nothing is ever pickled):

``ai_tools``     tool schema payloads by id (the ``AiTool`` table)
``runs``         one row per run (a root run and every child task's run)
``run_events``   progress events, keyed by the ROOT run id; ``id`` is the order
``checkpoints``  the latest checkpoint of each loop, one row per (run, path)

There are deliberately no foreign keys: workers write events and checkpoints
for runs that another process creates, in whatever order messages arrive.
The migration in ``migrations/versions/0001_initial.py`` creates exactly these
tables; a test checks that the two agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

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


class Base(DeclarativeBase):
    """Declarative base of the store's tables."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class AiTool(Base):
    """A tool schema payload ``{"name", "description", "parameters"}`` stored by id."""

    __tablename__ = "ai_tools"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    payload: Mapped[Any] = mapped_column(json_type(), nullable=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow, onupdate=utcnow)


class Run(Base):
    """One run: a whole workflow (root run, ``root_run_id == id``) or one task of it."""

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_status_created_at", "status", "created_at"),
        Index("ix_runs_parent_run_id_status", "parent_run_id", "status"),
        Index("ix_runs_runnable_status", "runnable", "status"),
    )

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    root_run_id: Mapped[str] = mapped_column(String(255), index=True)
    parent_run_id: Mapped[str | None] = mapped_column(String(255))
    runnable: Mapped[str] = mapped_column(String(255))
    path: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(32), default="pending")
    input: Mapped[Any] = mapped_column(json_type(), nullable=True)
    output: Mapped[Any] = mapped_column(json_type(), nullable=True)
    error: Mapped[Any] = mapped_column(json_type(), nullable=True)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    token_budget: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow, index=True)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    celery_task_id: Mapped[str | None] = mapped_column(String(255))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class RunEvent(Base):
    """One progress event of a workflow; ``run_id`` is the root run id, ``id`` the order."""

    __tablename__ = "run_events"
    __table_args__ = (Index("ix_run_events_run_id_id", "run_id", "id"),)

    id: Mapped[int] = mapped_column(EVENT_ID_TYPE, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(255))
    path: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(32), default="")
    phase: Mapped[str] = mapped_column(Text, default="")
    iteration: Mapped[int | None] = mapped_column(Integer)
    payload: Mapped[Any] = mapped_column(json_type(), nullable=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Checkpoint(Base):
    """The latest checkpoint of one loop (``iteration`` NULL: none yet) and whether it finished."""

    __tablename__ = "checkpoints"

    run_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    path: Mapped[str] = mapped_column(String(1024), primary_key=True)
    iteration: Mapped[int | None] = mapped_column(Integer)
    state: Mapped[Any] = mapped_column(json_type(), nullable=True)
    finished: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    result: Mapped[Any] = mapped_column(json_type(), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow, onupdate=utcnow)

"""What the SQL stores share: sessions from an engine or a factory, and upserts per dialect."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from orchestration.store.engine import session_factory

SUPPORTED_DIALECTS = ("postgresql", "sqlite")


class SqlStoreBase:
    """Holds a session factory and the dialect-specific ``INSERT`` used for upserts.

    ``bind`` is an :class:`~sqlalchemy.Engine` or a ``sessionmaker`` bound to
    one. Only SQLite and PostgreSQL are supported: both offer
    ``INSERT ... ON CONFLICT`` and ``RETURNING``, which keep every write a
    single atomic statement.
    """

    def __init__(self, bind: Engine | sessionmaker[Session]) -> None:
        self._sessions = session_factory(bind) if isinstance(bind, Engine) else bind
        with self._sessions() as session:
            self._dialect = session.get_bind().dialect.name
        if self._dialect not in SUPPORTED_DIALECTS:
            raise ValueError(
                f"the store supports {' and '.join(SUPPORTED_DIALECTS)}, not {self._dialect!r}; "
                "set DATABASE_URL to a postgresql:// or sqlite:/// URL"
            )

    @property
    def sessions(self) -> sessionmaker[Session]:
        """The session factory the store uses."""
        return self._sessions

    @property
    def engine(self) -> Engine:
        """The engine behind the sessions (``dispose()`` it when done with the store)."""
        bind = self._sessions.kw["bind"]
        if not isinstance(bind, Engine):
            raise TypeError(f"the store's sessions are bound to {type(bind).__name__}, not an Engine")
        return bind

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._dialect

    def _insert(self, entity: Any) -> postgresql.Insert | sqlite.Insert:
        """``INSERT`` with ``on_conflict_do_nothing`` / ``on_conflict_do_update`` for this dialect."""
        if self._dialect == "postgresql":
            return postgresql.insert(entity)
        return sqlite.insert(entity)

"""Store calls that ride out a database that is briefly away.

:class:`StoreRetry` runs a store call again, with exponential backoff and
jitter, while it fails on a *connection-level* error (:func:`is_connection_error`):
the server refused or dropped the connection, is shutting down or starting, ran
out of connection slots, or a transaction lost a deadlock or serialization
conflict; also when the pool's pre-ping met a connection an outage left in the
middle of a transaction (psycopg's ``can't change 'autocommit' now``: the pool
discards that connection, so another try gets a new one). A call that fails so
is tried again at once (a connection that died in the pool is replaced), then
with backoff; it stops before ``seconds`` have passed since that first retry
and raises :class:`~agentloop.orchestration.errors.StoreUnavailableError` from the last
error. The first try runs outside tenacity: its bookkeeping costs about as much
as a store round trip, and nearly every call succeeds at once.
Anything else (an integrity or data error, a missing table, a bug) is raised at
once: trying it again could not help.

The retry policy is `tenacity <https://tenacity.readthedocs.io>`_'s, composed
from its documented parts. A store call is one short transaction, so running it
again is safe; the only writes that could be applied twice are those whose
commit succeeded while its acknowledgement was lost with the connection:
``append_events`` may then store a batch of progress events twice and
``add_usage`` count a call's tokens twice. ``create_run`` and ``finish_run``
tell such a repeat apart (the run exists, or ended with the same outcome).
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_before_delay, wait_exponential_jitter

from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.settings.store import DEFAULT_STORE_RETRY_SECONDS

__all__ = ["StoreRetry", "is_connection_error", "retried"]

P = ParamSpec("P")
T = TypeVar("T")

logger = logging.getLogger(__name__)

#: SQLSTATE classes of errors that pass: connection exception, transaction rollback
#: (serialization failure, deadlock), insufficient resources (too many connections).
_TRANSIENT_CLASSES = ("08", "40", "53")
#: Operator intervention: the server is shutting down, crashed or starting up.
_TRANSIENT_STATES = ("57P01", "57P02", "57P03")
#: What SQLite says when another process holds the file's lock past the busy timeout.
_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")
#: What psycopg raises when SQLAlchemy's pre-ping turns autocommit on for a pooled connection that is
#: not idle: an outage left it mid-transaction or mid-command. Our code never sets autocommit, and
#: SQLAlchemy invalidates a connection whose ping raised, so this one is a connection's fault.
_LEFT_MID_TRANSACTION = "can't change 'autocommit' now: connection in transaction status"


def _transient(error: BaseException) -> bool:
    """Whether the driver's ``error`` (an OperationalError) is one that passes."""
    if isinstance(error, sqlite3.OperationalError):  # also "no such table", which never passes
        return any(text in str(error) for text in _SQLITE_BUSY)
    state = getattr(error, "sqlstate", None)
    if not isinstance(state, str):  # no answer from the server at all: refused, reset, timed out
        return True
    return state[:2] in _TRANSIENT_CLASSES or state in _TRANSIENT_STATES


def _is_psycopg(error: BaseException, name: str) -> bool:
    return any(cls.__name__ == name and cls.__module__.startswith("psycopg") for cls in type(error).__mro__)


def _left_mid_transaction(error: BaseException) -> bool:
    """Whether ``error`` is psycopg refusing the pre-ping's autocommit on a connection left busy."""
    return _is_psycopg(error, "ProgrammingError") and str(error).startswith(_LEFT_MID_TRANSACTION)


def is_connection_error(error: BaseException) -> bool:
    """Whether ``error`` says the database could not be reached, rather than that the data is wrong.

    True for a connection SQLAlchemy found dead (``connection_invalidated``), for
    an ``OperationalError`` whose cause passes and for a pooled connection that
    an outage left mid-transaction (see the module doc); never for an integrity
    or data error, nor for any other programming error.
    """
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, OperationalError):
        return error.orig is None or _transient(error.orig)
    if isinstance(error, ProgrammingError):
        return error.orig is not None and _left_mid_transaction(error.orig)
    # a driver error that reached us unwrapped
    if _is_psycopg(error, "OperationalError"):
        return _transient(error)
    return _left_mid_transaction(error)


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    level = logging.WARNING if state.attempt_number == 1 else logging.DEBUG
    logger.log(
        level,
        "run store unreachable (%s: %s); trying again in %.2fs (attempt %d)",
        type(error).__name__,
        str(error).strip().splitlines()[0] if error is not None and str(error).strip() else "",
        wait,
        state.attempt_number + 1,
    )


class StoreRetry:
    """Retry a store call on connection-level errors for up to ``seconds`` (``0``: never).

    ``initial`` is the first wait and ``maximum`` the longest; each wait doubles
    and gets up to ``initial`` of random jitter, so workers that lost the
    database together do not all come back at the same instant. ``sleep`` waits between tries
    (a test records the waits with it).
    """

    def __init__(
        self,
        seconds: float = DEFAULT_STORE_RETRY_SECONDS,
        *,
        initial: float = 0.05,
        maximum: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if seconds < 0:
            raise ValueError(f"seconds must not be negative, got {seconds}")
        self.seconds = seconds
        self._retrying = Retrying(
            retry=retry_if_exception(is_connection_error),
            stop=stop_before_delay(seconds),
            wait=wait_exponential_jitter(multiplier=initial, max=maximum, jitter=initial),
            before_sleep=_log_retry,
            sleep=sleep,
            reraise=True,
        )

    def call(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``function(*args, **kwargs)``, tried again while the database is unreachable.

        Raises :class:`~agentloop.orchestration.errors.StoreUnavailableError` when it still
        is after ``seconds``; any other error as it was raised.
        """
        try:  # the first try outside tenacity: its bookkeeping costs more than a store round trip
            return function(*args, **kwargs)
        except Exception as error:
            if not is_connection_error(error):
                raise
            if self.seconds <= 0:
                raise self._unavailable(error) from error
        try:
            return self._retrying(function, *args, **kwargs)
        except Exception as error:
            if not is_connection_error(error):
                raise
            raise self._unavailable(error) from error

    def _unavailable(self, error: BaseException) -> StoreUnavailableError:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return StoreUnavailableError(
            f"the run store's database was unreachable for {self.seconds:g}s "
            f"({type(error).__name__}: {first_line})",
            seconds=self.seconds,
        )

    def __repr__(self) -> str:
        return f"StoreRetry(seconds={self.seconds:g})"


class _Retrying(Protocol):
    retry: StoreRetry


S = TypeVar("S", bound=_Retrying)


def retried(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
    """A store method run through its store's ``retry`` (a :class:`StoreRetry`)."""

    @functools.wraps(method)
    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.retry.call(lambda: method(self, *args, **kwargs))

    return call

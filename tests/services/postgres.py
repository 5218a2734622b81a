"""A private PostgreSQL database for tests, found or started on demand.

Where the server comes from, in order:

1. ``AGENTLOOP_TEST_PG_URL`` (a superuser URL, e.g.
   ``postgresql://postgres@db:5432/postgres``), when set;
2. a server answering on ``127.0.0.1:5432`` with trust auth, as user
   ``postgres`` then ``root``;
3. a throw-away cluster started with ``initdb``/``pg_ctl`` (from ``PATH``) in a
   temporary folder on a free port, stopped and deleted afterwards.

On that server each test session gets its own database
(``agentloop_test_<random>``), dropped at the end, so parallel runs and other
users of the server are never touched. URLs are SQLAlchemy URLs
(``postgresql+psycopg://...``).

Use :func:`private_postgres_database` as a context manager, or
:func:`postgres_url_fixture` to make a pytest fixture. When no server can be
had the fixture skips, except on CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Literal, NoReturn

from sqlalchemy.engine import URL, make_url

from agentloop.orchestration.store.database import normalize_url
from tests.services import on_ci

ENV_URL = "AGENTLOOP_TEST_PG_URL"
LOCAL_HOST = "127.0.0.1"
LOCAL_PORT = 5432
ADMIN_USERS = ("postgres", "root")
DATABASE_PREFIX = "agentloop_test"


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL server could be found or started; the message says why."""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as error:  # pragma: no cover - depends on the installed extras
        raise PostgresUnavailableError(
            "psycopg is not installed: pip install 'agentloop[postgres]'"
        ) from error
    return psycopg


def sqlalchemy_url(*, user: str, host: str, port: int, database: str, password: str | None = None) -> str:
    """A ``postgresql+psycopg://`` URL (password included)."""
    url = URL.create("postgresql+psycopg", user, password, host, port, database)
    return url.render_as_string(hide_password=False)


def connect_kwargs(url: str) -> dict[str, Any]:
    """``psycopg.connect`` keyword arguments for a SQLAlchemy or libpq URL."""
    parsed = make_url(normalize_url(url))
    kwargs = {
        "host": parsed.host,
        "port": parsed.port,
        "user": parsed.username,
        "password": parsed.password,
        "dbname": parsed.database,
    }
    return {key: value for key, value in kwargs.items() if value is not None}


def _connection_error(url: str) -> str | None:
    try:
        with _psycopg().connect(**connect_kwargs(url), connect_timeout=3):
            return None
    except Exception as error:  # any failure to connect is a reason, not a crash
        return f"{type(error).__name__}: {str(error).strip() or 'connection failed'}"


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def find_server_url() -> tuple[str | None, str]:
    """``(admin URL, "")`` of a reachable existing server, or ``(None, why not)``."""
    explicit = os.environ.get(ENV_URL, "").strip()
    if explicit:
        given = normalize_url(explicit)
        problem = _connection_error(given)
        return (given, "") if problem is None else (None, f"{ENV_URL} is set but unusable ({problem})")
    if not _port_open(LOCAL_HOST, LOCAL_PORT):
        return None, f"nothing listens on {LOCAL_HOST}:{LOCAL_PORT}"
    problems = []
    for user in ADMIN_USERS:
        url = sqlalchemy_url(user=user, host=LOCAL_HOST, port=LOCAL_PORT, database="postgres")
        problem = _connection_error(url)
        if problem is None:
            return url, ""
        problems.append(f"as {user!r}: {problem}")
    return None, f"{LOCAL_HOST}:{LOCAL_PORT} refused us ({'; '.join(problems)})"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOCAL_HOST, 0))
        return int(probe.getsockname()[1])


def _cluster_owner() -> pwd.struct_passwd | None:
    """PostgreSQL refuses to run as root: as root, run the cluster as ``postgres`` or ``nobody``."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresUnavailableError(
        "running as root and neither user 'postgres' nor 'nobody' exists for initdb"
    )


@contextmanager
def private_cluster(*, superuser: str = "postgres") -> Iterator[str]:
    """Start a throw-away PostgreSQL cluster; yield its admin URL; stop and delete it after."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is None or pg_ctl is None:
        raise PostgresUnavailableError("initdb/pg_ctl are not on PATH, so no private cluster can be started")
    owner = _cluster_owner()
    root = Path(tempfile.mkdtemp(prefix="agentloop-pg-"))
    options: dict[str, Any] = {"check": True, "capture_output": True, "text": True, "cwd": root}
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
        options.update(user=owner.pw_uid, group=owner.pw_gid, extra_groups=[])
    data, port = root / "data", _free_port()
    server_options = f"-F -p {port} -k {root} -c listen_addresses={LOCAL_HOST}"
    initialise = [initdb, "-D", str(data), "-U", superuser, "-A", "trust", "-E", "UTF8", "--no-locale", "-N"]
    start = [pg_ctl, "-D", str(data), "-l", str(root / "server.log"), "-o", server_options, "-w", "start"]
    try:
        try:
            subprocess.run(initialise, **options)
            subprocess.run(start, **options)
        except (OSError, subprocess.CalledProcessError) as error:
            detail = getattr(error, "stderr", "") or str(error)
            raise PostgresUnavailableError(f"could not start a private cluster: {detail.strip()}") from error
        yield sqlalchemy_url(user=superuser, host=LOCAL_HOST, port=port, database="postgres")
    finally:
        if (data / "postmaster.pid").exists():  # started, even if pg_ctl gave up waiting for it
            stop = [pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]
            subprocess.run(stop, **{**options, "check": False})
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield an admin URL: an existing server, else a private cluster; else raise the reason."""
    url, reason = find_server_url()
    with ExitStack() as stack:
        if url is None:
            if os.environ.get(ENV_URL, "").strip():
                raise PostgresUnavailableError(reason)
            try:
                url = stack.enter_context(private_cluster())
            except PostgresUnavailableError as error:
                raise PostgresUnavailableError(f"{reason}; {error}") from error
        yield url


def drop_database(admin_url: str, name: str) -> None:
    """Drop database ``name`` on the server of ``admin_url``, disconnecting its sessions first."""
    psycopg = _psycopg()
    with psycopg.connect(**connect_kwargs(admin_url), autocommit=True) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        connection.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {}").format(psycopg.sql.Identifier(name)))


@contextmanager
def private_database(admin_url: str, *, prefix: str = DATABASE_PREFIX) -> Iterator[str]:
    """Create a uniquely named database on ``admin_url``'s server; yield its URL; drop it after."""
    psycopg = _psycopg()
    name = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(**connect_kwargs(admin_url), autocommit=True) as connection:
        connection.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        drop_database(admin_url, name)


@contextmanager
def private_postgres_database() -> Iterator[str]:
    """Yield the URL of a fresh private database (see the module docs); raises
    :class:`PostgresUnavailableError` when no server can be found or started."""
    with postgres_server() as admin_url, private_database(admin_url) as url:
        yield url


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the test for ``reason`` (PostgreSQL unavailable), or fail it on CI where it must run."""
    import pytest

    if on_ci():
        pytest.fail(f"PostgreSQL is required on CI but unavailable: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL unavailable: {reason}")


def postgres_url_fixture(
    scope: Literal["session", "package", "module", "class", "function"] = "session",
) -> Any:
    """A pytest fixture yielding a private PostgreSQL database URL (skips, or fails on CI).

    In a ``conftest.py`` or plugin: ``postgres_url = postgres_url_fixture()``.
    """
    import pytest

    @pytest.fixture(scope=scope)
    def postgres_url() -> Iterator[str]:
        with ExitStack() as stack:
            try:
                url = stack.enter_context(private_postgres_database())
            except PostgresUnavailableError as error:
                skip_or_fail(str(error))
            yield url

    return postgres_url

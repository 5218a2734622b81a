"""A process forked from one holding database or Redis connections (a prefork worker's main
process forks its pool children) opens its own: it never talks over, nor closes, its parent's."""

from __future__ import annotations

import os
from collections.abc import Callable

from sqlalchemy import Engine, text

from agentloop.orchestration.runtime.step_cache import RedisStepCache
from agentloop.orchestration.store import create_engine_for
from tests.services.redis_server import RedisServer


def in_forked_child(work: Callable[[], str]) -> str:
    """What ``work`` returns when run in a child forked from this process (or its error)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(reader)
            try:
                answer = work()
            except BaseException as error:
                answer = f"error: {error!r}"
            os.write(writer, answer.encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as answers:
        answer = answers.read()
    os.waitpid(pid, 0)
    return answer


def backend_pid(engine: Engine) -> str:
    with engine.connect() as connection:
        return str(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_forked_child_opens_its_own_postgresql_connection(pg_engine: Engine) -> None:
    engine = create_engine_for(pg_engine.url.render_as_string(hide_password=False), pool_size=1)
    try:
        parent = backend_pid(engine)  # pooled: the child inherits it, checked in
        child = in_forked_child(lambda: backend_pid(engine))
        assert child.isdigit() and child != parent
        assert backend_pid(engine) == parent  # the parent's connection was neither used nor closed
    finally:
        engine.dispose()


def test_a_forked_child_opens_its_own_sqlite_connection(tmp_path: object) -> None:
    engine = create_engine_for(f"sqlite:///{tmp_path}/fork.sqlite3")
    try:
        with engine.connect() as connection:
            parent = id(connection.connection.dbapi_connection)
        child = in_forked_child(lambda: str(engine.pool.checkedin()))
        assert child == "0"  # the child's pool starts empty
        with engine.connect() as connection:
            assert id(connection.connection.dbapi_connection) == parent
    finally:
        engine.dispose()


def test_a_forked_child_opens_its_own_redis_connection(restartable_redis: RedisServer) -> None:
    """redis-py's pools check the process id (``ConnectionPool._checkpid``): the step cache and the
    rate limiter's Redis client need nothing more."""
    cache = RedisStepCache(restartable_redis.url)
    cache.set_now("k", "v", ttl=60)

    def own_connection() -> str:
        return f"{cache.client.client_id()} {cache.get_now('k')}"

    parent = cache.client.client_id()
    child_id, value = in_forked_child(own_connection).split()
    assert (child_id != str(parent), value) == (True, "v")
    assert cache.client.client_id() == parent

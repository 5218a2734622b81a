"""The results of a batch pack's runs in the result backend, written together.

Each run of a batch pack (``batch_packs.py``) has its result where its own ``agentloop.launch``
would have left it: under its run id, in the result backend. ``Backend.store_result`` makes two
round trips for each (it reads the stored state first, so a ``SUCCESS`` stays: Celery's rule
against a lost worker's late write), which for a pack of a hundred runs are two hundred round trips
after the runs have ended. :func:`store_results` writes them as ``store_result`` would, with the
same rule, in two round trips on a key-value backend (one read of every stored state, and on Redis
one pipeline of the writes, each ``SET`` with its ``PUBLISH`` as Celery's ``RedisBackend._set``);
on any other backend it calls ``store_result`` for each.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from celery import states
from celery.backends.base import Backend, BaseKeyValueStoreBackend
from celery.backends.redis import RedisBackend

__all__ = ["store_results"]

#: A run's result to write: its run id (its task id), its value (or error) and its state.
Result = tuple[str, Any, str]


def store_results(backend: Backend, results: Sequence[Result], *, missing_only: Collection[str] = ()) -> None:
    """Write each of ``results`` to ``backend`` as ``backend.store_result`` would (the module doc);
    the results of the runs of ``missing_only`` only where the backend holds none for them."""
    if not results:
        return
    if not isinstance(backend, BaseKeyValueStoreBackend):
        for run_id, value, state in results:
            if run_id not in missing_only or backend.get_state(run_id) == states.PENDING:
                backend.store_result(run_id, value, state)
        return
    keys = [backend.get_key_for_task(run_id) for run_id, _, _ in results]
    stored = _ensured(backend, lambda: backend.mget(keys))
    if isinstance(stored, Mapping):  # a cache backend answers as memcached's get_multi: found keys only
        stored = [stored.get(key) for key in keys]
    writes: list[tuple[str, str, str]] = []
    for key, payload, (run_id, value, state) in zip(keys, stored, results, strict=True):
        if payload is not None and (
            run_id in missing_only or backend.decode_result(payload)["status"] == states.SUCCESS
        ):
            continue  # a first success stands (Backend._store_result), and a result a run has
        meta = backend._get_result_meta(
            result=backend.encode_result(value, state), state=state, traceback=None, request=None
        )
        meta["task_id"] = run_id
        encoded = backend.encode(meta)
        if isinstance(backend, RedisBackend) and len(encoded) > backend._MAX_STR_VALUE_SIZE:
            backend.store_result(run_id, value, state)  # refused as Celery refuses it
            continue
        writes.append((key, encoded, state))
    if isinstance(backend, RedisBackend):
        _ensured(backend, lambda: _redis_write(backend, writes))
        return
    for key, encoded, state in writes:
        backend._set_with_state(key, encoded, state)


def _redis_write(backend: RedisBackend, writes: list[tuple[str, str, str]]) -> None:
    """``RedisBackend._set_with_state`` of each of ``writes``, in one pipeline."""
    with backend.client.pipeline() as pipe:
        for key, encoded, state in writes:
            failure_expires = getattr(backend, "failure_expires", None)
            expires = failure_expires if state == states.FAILURE and failure_expires is not None else None
            expires = backend.expires if expires is None else expires
            if expires:
                pipe.setex(key, expires, encoded)
            else:
                pipe.set(key, encoded)
            pipe.publish(key, encoded)
        pipe.execute()


def _ensured(backend: BaseKeyValueStoreBackend, call: Any) -> Any:
    """``call()``, retried as the backend retries its own calls (Redis: ``ensure``)."""
    if isinstance(backend, RedisBackend):
        return backend.ensure(call, ())
    return call()

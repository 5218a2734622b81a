"""Celery settings for agentloop, read from the environment once, at import.

With nothing set, the embedded defaults need no server: Celery's in-memory
transport (``memory://``) and in-memory results (``cache+memory://``). Those
only work inside one process, so whoever needs a worker starts it in-process
as a thread (``orchestration.testing.servers.worker.embedded_worker``, as
``celery.contrib.testing`` does); ``celery -A orchestration worker`` on them
runs, but nothing outside that process can reach it.

Environment variables (all optional):

``BROKER_URL``
    Broker URL, e.g. ``amqp://guest:guest@127.0.0.1:5672//`` or
    ``redis://127.0.0.1:6379/0``. Default: ``REDIS_URL`` when set, else
    ``memory://``.
``REDIS_URL``
    Redis URL. Alone, it is both the broker and the result backend. With
    ``BROKER_URL`` (e.g. RabbitMQ) it is the result backend.
``RESULT_BACKEND``
    Result backend URL; wins over everything else. Default, in order:
    ``REDIS_URL``; the broker URL when the broker is Redis;
    ``cache+memory://`` when the broker is ``memory://``; ``rpc://`` when the
    broker is AMQP (RabbitMQ). ``rpc://`` delivers a result only to the client
    that sent the task and keeps no state, so chords (composites) and
    following a run from another process need a real backend: with RabbitMQ
    set ``REDIS_URL`` or ``RESULT_BACKEND`` too. Any other broker with no
    backend set is a configuration error.
``AGENTLOOP_IMPORTS``
    Comma-separated modules the worker imports at start (they register a
    deployment's runnables). Blanks are ignored. Default: none.
``AGENTLOOP_BEAT_SCHEDULE``
    The batches beat starts, as a JSON list of entries (see
    ``orchestration/celery_adapter/schedule.py``): each names a registered runnable, a
    ``crontab`` (five fields, UTC) or ``every`` (seconds), its ``inputs`` or an
    input ``provider``, and ``expires``. Default: none.
``AGENTLOOP_TASK_DEFAULT_QUEUE``
    Queue tasks go to and workers consume by default. Default: ``agentloop``.
``AGENTLOOP_TASK_SOFT_TIME_LIMIT``
    Seconds before ``SoftTimeLimitExceeded`` is raised inside a task.
    Default: ``900``.
``AGENTLOOP_TASK_TIME_LIMIT``
    Seconds before the worker kills a task's process. Must exceed the soft
    limit. Default: ``960``.
``AGENTLOOP_VISIBILITY_TIMEOUT``
    Seconds a Redis (or SQS) broker waits for the ack of a delivered message
    before it redelivers the message to another worker. With late acks a task
    is acked when it ends, so this must exceed the hard time limit, or a long
    task still running is delivered a second time. Default: hard limit + 300.
``AGENTLOOP_UNACKED_RESTORE_SECONDS``
    Redis only: how often a worker sweeps for messages whose worker died
    (unacknowledged past the visibility timeout) and puts them back in the
    queue. Default: ``60``. (kombu's own default sweep is about 100 s.)
``AGENTLOOP_RESULT_BACKEND_MAX_RETRIES``
    How often storing a result is retried while the result backend is
    unreachable (e.g. a Redis restart). Default: ``20``.
``AGENTLOOP_RESULT_EXPIRES``
    Seconds results are kept. Default: ``604800`` (7 days).
``AGENTLOOP_BROKER_CONNECTION_MAX_RETRIES``
    How often a lost broker connection is retried before giving up; ``0``
    retries forever. Default: ``100``.
``AGENTLOOP_WORKER_PREFETCH_MULTIPLIER``
    Messages each worker process reserves ahead (``0``: no limit). Default:
    ``1``, so a long LLM task does not hold back others reserved behind it.

Fixed settings: JSON is the only serializer for tasks and results and the only
content accepted (a pickle message is refused by the worker); late acks, and
a task whose worker process is lost is requeued; started state, task events
and sent events are on, so Flower sees every task; UTC; extended results
(task name, args and worker are stored with the result); no beat schedule yet.
On ``memory://`` the transport polls every 10 ms instead of kombu's 1 s.

Passwords in URLs are never printed by the project: use
``orchestration.celery_adapter.app.redact_url`` (or ``describe_app``) to show a URL.
"""

import os as _os

from orchestration.celery_adapter.schedule import schedule_from_json as _schedule_from_json


def _env(name: str, default: str | None = None) -> str | None:
    """The stripped value of environment variable ``name``; ``default`` when unset or blank."""
    value = _os.environ.get(name, "").strip()
    return value or default


def _env_int(name: str, default: int) -> int:
    """Environment variable ``name`` as a non-negative integer (``default`` when unset or blank)."""
    raw = _env(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")
    return value


def _scheme(url: str) -> str:
    """The transport part of a URL's scheme: ``amqp`` for ``amqp://...``, ``redis`` for ``rediss``."""
    scheme = url.split("://", 1)[0].lower().split("+")[0]
    return {"rediss": "redis", "pyamqp": "amqp", "amqps": "amqp"}.get(scheme, scheme)


def _default_result_backend(broker: str, redis_url: str | None) -> str:
    """The result backend implied by the broker when ``RESULT_BACKEND`` is not set (see module doc)."""
    if redis_url:
        return redis_url
    kind = _scheme(broker)
    if kind == "redis":
        return broker
    if kind == "memory":
        return "cache+memory://"
    if kind == "amqp":
        return "rpc://"
    raise ValueError(
        f"no result backend for broker scheme {kind!r}: set RESULT_BACKEND or REDIS_URL "
        "(agentloop needs a result backend for chords and for following runs)"
    )


# -- broker and results -----------------------------------------------------------------------------

_REDIS_URL = _env("REDIS_URL")

broker_url: str = _env("BROKER_URL") or _REDIS_URL or "memory://"
result_backend: str = _env("RESULT_BACKEND") or _default_result_backend(broker_url, _REDIS_URL)

broker_connection_retry_on_startup = True
broker_connection_retry = True
broker_connection_max_retries: int = _env_int("AGENTLOOP_BROKER_CONNECTION_MAX_RETRIES", 100)
# A result backend that restarts (Redis) is retried, not a lost result: the step that
# finished while it was away still records its result once it is back.
result_backend_always_retry = True
# On a lost broker connection, tasks running with late acks cannot be acknowledged any more:
# cancel them so the broker delivers them again (Celery 6's default). Durable loops resume
# from their checkpoints and finished steps are not run again, so this loses no work.
worker_cancel_long_running_tasks_on_connection_loss = True
result_backend_max_retries: int = _env_int("AGENTLOOP_RESULT_BACKEND_MAX_RETRIES", 20)

# -- serialization: JSON only -----------------------------------------------------------------------

task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
result_accept_content = ["json"]

# -- long LLM tasks ---------------------------------------------------------------------------------

task_soft_time_limit: int = _env_int("AGENTLOOP_TASK_SOFT_TIME_LIMIT", 900)
task_time_limit: int = _env_int("AGENTLOOP_TASK_TIME_LIMIT", 960)
if task_soft_time_limit >= task_time_limit:
    raise ValueError(
        f"AGENTLOOP_TASK_SOFT_TIME_LIMIT ({task_soft_time_limit}) must be below "
        f"AGENTLOOP_TASK_TIME_LIMIT ({task_time_limit})"
    )

_visibility_timeout: int = _env_int("AGENTLOOP_VISIBILITY_TIMEOUT", task_time_limit + 300)
if _visibility_timeout <= task_time_limit:
    raise ValueError(
        f"AGENTLOOP_VISIBILITY_TIMEOUT ({_visibility_timeout}) must exceed AGENTLOOP_TASK_TIME_LIMIT "
        f"({task_time_limit}): a task still running would be delivered twice"
    )
broker_transport_options: dict[str, float] = {
    "visibility_timeout": _visibility_timeout,
    # One Redis scan per interval (kombu otherwise scans on every tenth 10 s tick).
    "unacked_restore_interval": _env_int("AGENTLOOP_UNACKED_RESTORE_SECONDS", 60),
    "unacked_restore_throttle": 1,
}
if _scheme(broker_url) == "memory":
    # kombu polls its in-memory queues once a second by default: each hop of a chain would cost 1 s.
    broker_transport_options["polling_interval"] = 0.01

task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier: int = _env_int("AGENTLOOP_WORKER_PREFETCH_MULTIPLIER", 1)
result_expires: int = _env_int("AGENTLOOP_RESULT_EXPIRES", 7 * 24 * 3600)
# Off: the backend would keep every task's arguments (runs' inputs) next to its result,
# doubling what each task writes to Redis, for nothing the framework reads.
result_extended = False

# -- visibility in Flower ---------------------------------------------------------------------------

task_track_started = True
worker_send_task_events = True
task_send_sent_event = True

# -- routing, time, modules, schedule -------------------------------------------------------------

task_default_queue: str = _env("AGENTLOOP_TASK_DEFAULT_QUEUE") or "agentloop"
timezone = "UTC"
enable_utc = True
imports: tuple[str, ...] = tuple(
    name.strip() for name in (_env("AGENTLOOP_IMPORTS") or "").split(",") if name.strip()
)
# Batches run by ``celery -A orchestration beat`` (exactly one beat per deployment).
# Write entries here with ``orchestration.celery_adapter.schedule.batch_entry(...)``, or set them as JSON.
beat_schedule: dict[str, dict[str, object]] = _schedule_from_json(_env("AGENTLOOP_BEAT_SCHEDULE") or "")

"""Celery settings for agentloop: a projection of :func:`agentloop.orchestration.settings.load_settings`.

The environment is read once, at import, by ``orchestration/settings/`` (the
only module that reads it); this module turns those settings into the
attributes Celery reads. Blank variables count as unset, and a malformed one
stops the import with an error that names it.

With nothing set, the embedded defaults need no server: Celery's in-memory
transport (``memory://``) and in-memory results (``cache+memory://``). Those
only work inside one process, so whoever needs a worker starts it in-process
as a thread (``agentloop.orchestration.celery_adapter.embedded.embedded_worker``, as
``celery.contrib.testing`` does); ``celery -A agentloop worker`` on them
runs, but nothing outside that process can reach it.

Environment variables Celery's settings come from (all optional; the store's,
the model's, ``AGENTLOOP_CHECKPOINT_SECONDS`` and ``AGENTLOOP_WIRE_VERSION_OVERRIDE``
are documented with the fields of ``agentloop.orchestration.settings.Settings``):

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
    Seconds before ``SoftTimeLimitExceeded`` is raised inside a task (never
    swallowed by the framework; see docs/deployment.md, "Time limits").
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
``AGENTLOOP_DELIVERY_LIMIT``
    On every broker: how often a loop may be started without saving a
    checkpoint (its worker died, its connection dropped); the run store
    counts each start, and the one past the limit ends the run ``failed``
    with ``DeliveryLimitError``. On RabbitMQ also the queues'
    ``x-delivery-limit``: every client and worker must use the same value
    (RabbitMQ refuses a queue declared with other arguments). Default: ``20``.

With a RabbitMQ broker (``amqp://``) the default queue and ``<queue>.batch``
(a batch's chunks and launches: quorum queues have no priorities) are declared
as quorum queues with that delivery limit, dead-lettering to ``<queue>.dead``,
on a topic exchange named like the queue (Celery's native delayed delivery
needs one for countdowns on quorum queues); messages are published with
publisher confirms. Redis and the others keep Celery's one queue.

Fixed settings: JSON is the only serializer for tasks and results and the only
content accepted (a pickle message is refused by the worker); late acks, and
a task whose worker process is lost is requeued; messages sent are retried for
about 30 s while the broker is away, and running tasks are not cancelled when
its connection drops (docs/deployment.md, "Redis"); task events and sent events
are on, so Flower sees every task; the ``STARTED`` state is written for the
tasks clients send (the framework's internal tasks skip it:
``INTERNAL_TASKS`` in ``orchestration/celery_adapter/tasks.py``); UTC; no
extended results (a task's args are not copied into the result backend); no
beat schedule yet.
On ``memory://`` the transport polls every 10 ms instead of kombu's 1 s.

Passwords in URLs are never printed by the project: use
``agentloop.orchestration.redaction.redact_url`` (or ``describe_app``) to show a URL.
"""

from agentloop.orchestration.celery_adapter.config import celery_config as _celery_config
from agentloop.orchestration.settings import load_settings as _load_settings

# Every Celery setting, from the environment's settings (see orchestration/celery_adapter/config.py).
# A deployment may add its own below, e.g. ``beat_schedule`` entries written with
# ``agentloop.orchestration.celery_adapter.schedule.batch_entry(...)``.
globals().update(_celery_config(_load_settings()))

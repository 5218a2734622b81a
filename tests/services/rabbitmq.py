"""A private RabbitMQ virtual host for tests.

``private_rabbitmq_vhost()`` yields an AMQP URL; ``private_rabbitmq()`` yields
a :class:`RabbitMQTarget` that also names the queue a test should use. Where
the broker comes from, in order:

1. ``AGENTLOOP_TEST_AMQP_URL``, when set, is used as given, with a unique
   queue name (nothing is created or deleted on the server but that queue).
2. A RabbitMQ answering on ``127.0.0.1:5672`` (guest/guest): with
   ``rabbitmqctl`` usable (normally as root, or a user holding the Erlang
   cookie) a fresh vhost ``agentloop-test-<hex>`` is created, ``guest`` is
   given all permissions on it, and it is deleted afterwards with everything
   in it. When ``rabbitmqctl`` is missing or refused, the default vhost ``/``
   is shared instead: isolation then rests on a unique queue name
   (:attr:`RabbitMQTarget.queue`) and a unique worker hostname, and that
   queue is deleted afterwards; exchanges Celery declares (``celery.pidbox``,
   ``celeryev``) are shared, which is harmless because their bindings are
   per worker.
3. No broker: :class:`~tests.services.redis_server.ServiceUnavailable`
   (skip), or :class:`~tests.services.redis_server.ServiceRequiredError`
   when ``CI`` is true.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from agentloop.orchestration.celery_adapter.app import create_app
from tests.services.redis_server import service_unavailable

__all__ = ["RabbitMQTarget", "close_connections", "list_queues", "private_rabbitmq", "private_rabbitmq_vhost"]

_HOST = "127.0.0.1"
_PORT = 5672
_USER = "guest"
_PASSWORD = "guest"
_CTL_TIMEOUT = 30.0


@dataclass(frozen=True, kw_only=True)
class RabbitMQTarget:
    """Where a test talks to RabbitMQ.

    Attributes:
        url: the AMQP URL, vhost included.
        vhost: the vhost's name (``/`` when shared).
        private: True when the vhost was created for this test alone.
        queue: the queue to use as default queue (``AGENTLOOP_TASK_DEFAULT_QUEUE``
            for a worker, ``task_default_queue`` for a client): ``agentloop`` on a
            private vhost, a unique name on a shared one.
    """

    url: str
    vhost: str
    private: bool
    queue: str


def _answers_tcp(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``rabbitmqctl -q ARGS``; raises ``OSError``/``CalledProcessError``/``TimeoutExpired``."""
    executable = shutil.which("rabbitmqctl")
    if executable is None:
        raise FileNotFoundError("rabbitmqctl is not on PATH")
    return subprocess.run(
        [executable, "-q", *args], capture_output=True, text=True, check=True, timeout=_CTL_TIMEOUT
    )


def list_queues(vhost: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The queues of ``vhost`` on the machine's RabbitMQ: name -> (type, arguments); needs
    ``rabbitmqctl`` (no management plugin)."""
    listing = _rabbitmqctl("list_queues", "-p", vhost, "--formatter", "json", "name", "type", "arguments")
    queues = {}
    for queue in json.loads(listing.stdout):
        arguments = queue.get("arguments") or {}
        if isinstance(arguments, list):  # [[name, AMQP type, value], ...]
            arguments = {str(item[0]): item[-1] for item in arguments}
        queues[str(queue["name"])] = (str(queue["type"]), dict(arguments))
    return queues


def _amqp_url(vhost: str) -> str:
    return f"amqp://{_USER}:{_PASSWORD}@{_HOST}:{_PORT}/{quote(vhost, safe='')}"


def _delete_queue(url: str, queue: str) -> None:
    """Delete ``queue`` on the broker at ``url``; best effort (the test is over)."""
    app = create_app(overrides={"broker_url": url, "broker_connection_timeout": 5}, main="agentloop-cleanup")
    try:
        with suppress(Exception), app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
    finally:
        app.close()


@contextmanager
def private_rabbitmq() -> Iterator[RabbitMQTarget]:
    """A RabbitMQ target private to the ``with`` block (see the module doc for how).

    Raises:
        ServiceUnavailable: no RabbitMQ here (skip the test).
        ServiceRequiredError: no RabbitMQ here and ``CI`` is set.
    """
    suffix = uuid.uuid4().hex[:12]
    external = os.environ.get("AGENTLOOP_TEST_AMQP_URL", "").strip()
    if external:
        target = RabbitMQTarget(url=external, vhost="?", private=False, queue=f"agentloop-test-{suffix}")
        try:
            yield target
        finally:
            _delete_queue(target.url, target.queue)
        return
    if not _answers_tcp(_HOST, _PORT):
        raise service_unavailable(f"no RabbitMQ on {_HOST}:{_PORT}: start one or set AGENTLOOP_TEST_AMQP_URL")
    vhost = f"agentloop-test-{suffix}"
    try:
        _rabbitmqctl("add_vhost", vhost)
        created = True
    except (OSError, subprocess.SubprocessError):
        created = False  # no rabbitmqctl, or no right to use it: share "/" (module doc)
    if not created:
        shared = RabbitMQTarget(
            url=_amqp_url("/"), vhost="/", private=False, queue=f"agentloop-test-{suffix}"
        )
        try:
            yield shared
        finally:
            _delete_queue(shared.url, shared.queue)
        return
    try:
        _rabbitmqctl("set_permissions", "-p", vhost, _USER, ".*", ".*", ".*")
        yield RabbitMQTarget(url=_amqp_url(vhost), vhost=vhost, private=True, queue="agentloop")
    finally:
        with suppress(OSError, subprocess.SubprocessError):
            _rabbitmqctl("delete_vhost", vhost)


@contextmanager
def private_rabbitmq_vhost() -> Iterator[str]:
    """The AMQP URL of a private RabbitMQ vhost for the ``with`` block.

    When ``rabbitmqctl`` cannot be used this is the shared default vhost:
    use :func:`private_rabbitmq` to also get the unique queue name that
    isolates a test there.
    """
    with private_rabbitmq() as target:
        yield target.url


def close_connections(vhost: str) -> int:
    """Close every client connection to ``vhost`` (``rabbitmqctl close_connection``), as a network
    blip does; returns how many were closed. Needs ``rabbitmqctl``."""
    listing = _rabbitmqctl("list_connections", "pid", "vhost")  # JSON's pids are not close_connection's
    closed = 0
    for line in listing.stdout.splitlines():
        pid, _, name = line.partition("\t")
        if name == vhost and pid.startswith("<"):
            with suppress(subprocess.CalledProcessError):  # it went away meanwhile
                _rabbitmqctl("close_connection", pid, "agentloop test: a network blip")
                closed += 1
    return closed

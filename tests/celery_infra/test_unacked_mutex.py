"""Issue 33, item 7: kombu's Redis sweep of dead workers' messages runs under a lock
(``unacked_mutex``) that a worker killed while holding it left for kombu's 300 s. Its expiry is the
sweep's interval (``AGENTLOOP_UNACKED_RESTORE_SECONDS``): on a private Redis, a lock taken the way
kombu takes it and never released (its holder killed) lives that long, and once it has gone the
next sweep brings the dead worker's message back."""

from __future__ import annotations

import time

from kombu.transport.redis import Mutex

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.settings import load_settings
from tests.services.redis_server import RedisServer

RESTORE_SECONDS = 2


def test_the_sweep_lock_of_a_killed_worker_expires_with_the_restore_interval(
    redis_server: RedisServer,
) -> None:
    settings = load_settings(
        {
            "BROKER_URL": redis_server.url,
            "RESULT_BACKEND": "cache+memory://",
            "AGENTLOOP_UNACKED_RESTORE_SECONDS": str(RESTORE_SECONDS),
        }
    )
    app = create_app(settings=settings)
    try:
        with app.connection_for_write() as connection:
            channel = connection.default_channel
            assert channel.unacked_mutex_expire == RESTORE_SECONDS  # the option reached kombu
            channel.visibility_timeout = 0  # every unacknowledged message is overdue at once
            queue = connection.SimpleQueue("mutex-test")
            queue.put({"n": 1})
            taken = queue.get(timeout=5)  # taken by a worker that dies before acknowledging it
            client = channel.client

            def waiting() -> int:  # the messages in the queue
                return int(client.llen("mutex-test"))

            assert taken.payload == {"n": 1} and waiting() == 0
            # a worker killed inside its sweep: the lock, taken as kombu takes it, never released
            held = Mutex(client, channel.unacked_mutex_key, channel.unacked_mutex_expire)
            held.__enter__()
            ttl = client.ttl(channel.unacked_mutex_key)
            assert 0 < ttl <= RESTORE_SECONDS, f"the lock of a dead sweep lives {ttl} s"
            channel.qos.restore_visible(interval=1)  # held: this sweep restores nothing
            assert waiting() == 0
            sweeps, deadline = 0, time.monotonic() + 60
            while waiting() == 0:
                assert time.monotonic() < deadline, f"not restored after {sweeps} sweeps"
                time.sleep(0.5)
                channel.qos.restore_visible(interval=1)
                sweeps += 1
            assert queue.get(timeout=5).payload == {"n": 1}
            queue.close()
    finally:
        app.close()

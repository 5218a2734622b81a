"""A chord's part that ends while its Redis result backend restarts is counted once, and the chord's
callback is sent once (``celery_adapter/patches.py``, "a chord part's return is not retried").

The fault suite's ``Redis restarted`` found it: about one scenario run in a hundred, a branch whose
work had succeeded failed its run with "ConnectionError Connection closed by server.", raised by
Celery's ``RedisBackend.on_chord_part_return`` after the task's work was done. Here the backend's
own code counts the parts of a real chord on a private Redis (append-only, so a restart keeps the
chord's state), through a subclass of ``RedisBackend`` that the patch is applied to (the class
Celery ships is left as it is in this process).
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, states
from celery.app.task import Context
from celery.backends.redis import CHORD_PART_RETURN_LUA, RedisBackend
from kombu.utils.json import loads

from agentloop.orchestration.celery_adapter.config import PUBLISH_RETRY_POLICY
from agentloop.orchestration.celery_adapter.patches import (
    RetriedScript,
    chord_scripts_are_retried,
    retry_chord_scripts,
)
from tests.services.redis_server import RedisServer, ServiceUnavailable, private_redis_server

pytestmark = pytest.mark.integration

CALLBACK = "chordparts.merge"
QUEUE = "celery"  # where the callback is sent: the app's default queue


def merge(parts: list[int]) -> list[int]:
    """The chord's callback (never run here: its messages are read from the queue)."""
    return parts


class MendedBackend(RedisBackend):  # type: ignore[misc]
    """Celery's Redis result backend with the patch applied to this class only."""


retry_chord_scripts(MendedBackend)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    monkeypatch.delenv("AGENTLOOP_TEST_REDIS_URL", raising=False)  # a server this test can restart
    try:
        with private_redis_server(appendonly=True) as started:
            yield started
    except ServiceUnavailable as unavailable:
        pytest.skip(unavailable.reason)


class Chord:
    """A chord of ``size`` parts whose parts end through ``backend``, and its callback's messages."""

    def __init__(self, server: RedisServer, backend_class: type[RedisBackend], size: int) -> None:
        self.app = Celery("chordparts", broker=server.url, backend=server.url)
        self.app.conf.task_publish_retry_policy = PUBLISH_RETRY_POLICY
        self.app.task(name=CALLBACK)(merge)
        self.backend = backend_class(app=self.app, url=server.url)
        self.group = str(uuid.uuid4())
        self.backend.set_chord_size(self.group, size)

    def part_ends(self, index: int) -> None:
        """Part ``index`` succeeded with ``index`` as its result: the backend counts it, as the
        tracer of the worker that ran it does."""
        callback = dict(self.app.signature(CALLBACK))
        request = Context(id=f"part-{index}", group=self.group, group_index=index, chord=callback)
        self.backend.on_chord_part_return(request, states.SUCCESS, index)

    def callbacks_sent(self) -> list[Any]:
        """The arguments of each callback message in the broker's queue."""
        messages = [loads(raw) for raw in self.backend.client.lrange(QUEUE, 0, -1)]
        return [loads(_body(message))[0] for message in messages]


def _body(message: dict[str, Any]) -> str:
    return base64.b64decode(message["body"]).decode()


def _away_for(server: RedisServer, seconds: float) -> threading.Thread:
    """Stop ``server`` now and start it again ``seconds`` later (in a thread)."""
    server.stop()
    back = threading.Thread(target=lambda: (time.sleep(seconds), server.start()), daemon=True)
    back.start()
    return back


def test_the_subclass_runs_its_chord_scripts_retried() -> None:
    # (Whether Celery's own class is patched depends on whether this process started an embedded
    # worker: tests/operations/test_ops_worker_patches.py checks that in fresh interpreters.)
    assert chord_scripts_are_retried(MendedBackend)


def test_a_part_that_ends_while_redis_restarts_is_counted_and_the_callback_sent_once(
    server: RedisServer,
) -> None:
    chord = Chord(server, MendedBackend, size=3)
    chord.part_ends(0)
    chord.part_ends(1)

    back = _away_for(server, 3.0)
    chord.part_ends(2)  # Redis is away: the count waits for it instead of failing the task
    back.join()

    assert chord.callbacks_sent() == [[[0, 1, 2]]]


class LosesAReply:
    """The count script, whose next run once :attr:`armed` Redis carries out while its reply is
    lost on the way back: a connection that closes between the two, as when Redis stops right
    after the script ran. The loss reaches the caller (``surfaces``), or redis-py's own retry of
    the command runs it again at once and answers with the second run's reply."""

    def __init__(self, script: Any, *, surfaces: bool = True) -> None:
        self.script = script
        self.surfaces = surfaces
        self.armed = False
        self.runs = 0

    def __call__(self, keys: Any = (), args: Any = (), client: Any = None) -> Any:
        self.runs += 1
        answer = self.script(keys=keys, args=args, client=client)
        if self.armed:
            self.armed = False
            if self.surfaces:
                raise redis.ConnectionError("Connection closed by server.")
            self.runs += 1
            answer = self.script(keys=keys, args=args, client=client)
        return answer


@pytest.mark.parametrize("surfaces", [True, False], ids=["the loss reaches the backend", "redis-py retries"])
@pytest.mark.parametrize("last", [True, False], ids=["the last part", "a part before the last"])
def test_a_count_whose_reply_was_lost_is_not_counted_twice_and_the_last_still_sends_the_callback(
    server: RedisServer, last: bool, surfaces: bool
) -> None:
    chord = Chord(server, MendedBackend, size=3)
    count: RetriedScript = chord.backend._chord_part_return_script
    lossy = count.script = LosesAReply(count.script, surfaces=surfaces)
    chord.part_ends(0)
    if last:
        chord.part_ends(1)
    lossy.armed = True  # part 2's count runs and its reply is lost (the last: it claimed the callback)
    chord.part_ends(2)
    if not last:
        chord.part_ends(1)

    assert lossy.runs == 4  # part 2's ran twice
    assert chord.callbacks_sent() == [[[0, 1, 2]]]  # each part once, in order; one callback


def test_without_the_patch_the_count_whose_reply_was_lost_fails_the_task(server: RedisServer) -> None:
    # What the worker did before: the error left the backend, and the task (and its run) failed.
    chord = Chord(server, RedisBackend, size=2)
    # Celery's count script as Celery runs it (this process's class may be patched by a worker)
    script = chord.backend.client.register_script(CHORD_PART_RETURN_LUA)
    lossy = chord.backend._chord_part_return_script = LosesAReply(script)
    chord.part_ends(0)
    lossy.armed = True
    with pytest.raises(redis.ConnectionError):
        chord.part_ends(1)
    assert chord.callbacks_sent() == []

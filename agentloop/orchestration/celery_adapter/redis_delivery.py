"""Atomic delivery on the Redis broker: a message leaves its queue only into the unacknowledged hash.

kombu's Redis transport takes a message with ``BRPOP`` and, once the reply is in the worker,
writes it to the ``unacked`` hash in a second command (``QoS.append``); only that copy is what
the visibility timeout restores. Between the two the message exists nowhere but in the worker's
memory, so it is lost for good when

* the worker dies (``SIGKILL``, the machine) after the pop and before the write, or
* Redis stops after it popped the message for a blocked ``BRPOP`` and before the reply left
  (a restart drops the replies it has not written; its append-only file keeps the pop).

Upstream: celery/kombu#305 ("Tasks lost in redis", open since 2014). The fault suite found both
(``worker SIGKILLed``, ``Redis restarted``: a record-search run whose branch message vanished).

Here the pop and the write are one Lua script (:data:`POP_AND_HOLD`): the first non-empty of the
queues' lists (priority order, then the channel's queue rotation, as kombu's ``BRPOP`` reads them)
gives its oldest message, which lands in ``unacked`` (with its ``unacked_index`` time) in the same
step. A worker or a Redis that dies at any point leaves the message in a queue or in ``unacked``,
where the visibility timeout brings it back. A script cannot block, so a channel that found
nothing waits on a *doorbell* instead: every message an agentloop process sends also pushes a
token to ``_kombu.doorbell.<queue>`` in the same transaction (kept to :data:`DOORBELL_TOKENS`),
and the waiting channel's ``BRPOP`` on its queues' doorbells wakes it to pop again. Losing a token
loses nothing; a channel that popped a message pops again at once, so a backlog drains without
tokens. A message sent by a producer that does not ring (a plain Celery app of another service,
a release before this one) is found within :data:`DOORBELL_WAIT_SECONDS`.

The patch is installed on kombu's Redis ``Channel`` class by :func:`install_atomic_delivery`
(``create_app`` calls it in every process that builds an app: producers must ring) and acts only
on connections whose transport options carry :data:`OPTION` (``celery_adapter/config.py`` sets it
for a Redis broker), so another kombu connection in the same process keeps kombu's behaviour; so
does one with ``global_keyprefix`` (its keys are rewritten by a client this patch does not see).
A Redis that refuses the script (scripting disabled, or an ACL without ``EVAL``) answers the first
poll with an error: that channel goes back to kombu's ``BRPOP``, with a warning that says what it
gives up. Checked with kombu 5.7 (:data:`KOMBU_VERSIONS`); other versions keep kombu's own delivery.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import kombu
from kombu.transport.virtual import Empty
from kombu.transport.virtual import QoS as VirtualQoS
from kombu.utils import json as kombu_json
from redis.exceptions import ResponseError

from agentloop.orchestration.celery_adapter.patches import kombu_redis, text_of, version_within

__all__ = [
    "DOORBELL_TOKENS",
    "DOORBELL_WAIT_SECONDS",
    "KOMBU_VERSIONS",
    "OPTION",
    "POP_AND_HOLD",
    "doorbell_key",
    "install_atomic_delivery",
]

logger = logging.getLogger(__name__)

#: The transport option that turns atomic delivery on for a connection.
OPTION = "agentloop_atomic_delivery"
#: kombu versions (major, minor) whose Redis channel internals this patch was written against.
KOMBU_VERSIONS = ((5, 7), (5, 8))
#: Tokens a doorbell keeps: enough to wake every waiting channel; more would only wake them for
#: nothing.
DOORBELL_TOKENS = 100
#: How long a channel that found its queues empty waits on their doorbells before it looks again
#: (the longest a message from a producer that does not ring waits for an idle worker).
DOORBELL_WAIT_SECONDS = 0.25

#: ``KEYS``: the queues' lists in the order to read them, then ``unacked`` and ``unacked_index``;
#: ``ARGV[1]``: the time to index the message under, then for each list ``1`` when its messages are
#: held (``0``: a queue consumed without acknowledgements, as Celery's control replies are; kombu
#: never acknowledges those). Returns ``BRPOP``'s reply: ``{list, message}`` (and the delivery tag
#: when the message is held: the worker need not write it again), or nil. A message
#: that is not kombu's JSON (no delivery tag to hold it under) is handed over as ``BRPOP`` would,
#: for the worker's edge to refuse and dead-letter. Only the message's ``properties`` (kombu writes
#: them last) are decoded where they can be found in its last 4 KiB (another layout is decoded
#: whole): a 1 MB message took 4.4 ms in the script here against 6.6 ms decoded whole; kombu alone
#: spent 1.7 ms on its ``BRPOP`` and then sent the same megabyte back for its ``HSET``.
POP_AND_HOLD = """
local function properties_of(item)
  local from = #item - 4096
  if from < 1 then from = 1 end
  local at = string.find(item, '"properties": {', from, true)
  if at then
    local ok, properties = pcall(cjson.decode, string.sub(item, at + 14, #item - 1))
    if ok and type(properties) == 'table' then return properties end
  end
  local ok, message = pcall(cjson.decode, item)
  if ok and type(message) == 'table' and type(message['properties']) == 'table' then
    return message['properties']
  end
  return nil
end

local lists = #KEYS - 2
for i = 1, lists do
  local item = redis.call('RPOP', KEYS[i])
  if item then
    local properties = ARGV[i + 1] == '1' and properties_of(item) or nil
    if properties then
      local tag = properties['delivery_tag']
      local info = properties['delivery_info']
      if type(tag) == 'string' and type(info) == 'table' then
        local held = '[' .. item .. ',' .. cjson.encode(info['exchange'] or '') .. ','
          .. cjson.encode(info['routing_key'] or '') .. ']'
        redis.call('HSET', KEYS[lists + 1], tag, held)
        redis.call('ZADD', KEYS[lists + 2], ARGV[1], tag)
        return {KEYS[i], item, tag}
      end
    end
    return {KEYS[i], item}
  end
end
return false
"""

#: kombu's own JSON helpers (untyped): the messages are written and read as kombu does.
_dumps: Callable[[Any], str] = kombu_json.dumps
_loads: Callable[[str], Any] = kombu_json.loads

_INSTALLED = "_agentloop_atomic_delivery"
#: Where a channel keeps whether it delivers atomically (in the instance's ``__dict__``).
_ATOMIC = "_agentloop_atomic"
#: ... and the queues it consumes without acknowledgements (their messages are not held).
_UNACKNOWLEDGED = "_agentloop_no_ack"
#: ... and the delivery tags of the messages being delivered that the script already held.
_HELD = "_agentloop_held"
#: ... and what its pending poll command is: a pop (the script) or a wait (``BRPOP`` on doorbells),
_PENDING, _POP, _WAIT = "_agentloop_pending", "pop", "wait"
#: ... and whether its last pop found its queues empty (its next poll waits on the doorbells).
_FOUND_NONE = "_agentloop_found_none"


def doorbell_key(queue: str) -> str:
    """The list a message sent to ``queue`` rings (pushes a token to)."""
    return f"_kombu.doorbell.{queue}"


def _atomic(channel: Any) -> bool:
    """Whether ``channel`` delivers atomically: its connection asked for it, without a key prefix."""
    cached = channel.__dict__.get(_ATOMIC)
    if cached is None:
        options = getattr(getattr(channel.connection, "client", None), "transport_options", None) or {}
        cached = bool(options.get(OPTION)) and not getattr(channel, "global_keyprefix", "")
        channel.__dict__[_ATOMIC] = cached
    return bool(cached)


def _ring(add: Callable[..., Any], queue: str) -> None:
    """Push a token to ``queue``'s doorbell, bounded, with ``add(command, *args)`` (a pipeline's,
    or kombu's publish batch's)."""
    bell = doorbell_key(queue)
    add("lpush", bell, 1)
    add("ltrim", bell, 0, DOORBELL_TOKENS - 1)


def _put(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def put(self: Any, queue: str, message: Any, **kwargs: Any) -> Any:
        if not _atomic(self):
            return original(self, queue, message, **kwargs)
        batch = kwargs.get("_publish_batch")
        if batch is not None:  # kombu adds the message's commands to the producer's batch
            original(self, queue, message, **kwargs)
            _ring(batch.add, queue)
            return None
        key = self._q_for_pri(queue, self._get_message_priority(message, reverse=False))
        with self.conn_or_acquire() as client, client.pipeline() as pipe:  # MULTI: message and token
            pipe.lpush(key, _dumps(message))
            if self._expires and queue in self._expires:
                for step in self.priority_steps:
                    pipe.pexpire(self._q_for_pri(queue, step), self._expires[queue])
            _ring(lambda command, *args: getattr(pipe, command)(*args), queue)
            pipe.execute()
        return None

    return put


def _brpop_start(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def brpop_start(self: Any, timeout: float | None = None) -> Any:
        if not _atomic(self):
            return original(self, timeout)
        queues = self._queue_cycle.consume(len(self.active_queues))
        if not queues:
            return None
        connection = self.client.connection
        if self.__dict__.get(_FOUND_NONE):
            wait = min(timeout or self.brpop_timeout or DOORBELL_WAIT_SECONDS, DOORBELL_WAIT_SECONDS)
            connection.send_command("BRPOP", *[doorbell_key(queue) for queue in queues], wait)
            self.__dict__[_PENDING] = _WAIT
        else:
            unacknowledged = self.__dict__.get(_UNACKNOWLEDGED, ())
            order = [(queue, step) for step in self.priority_steps for queue in queues]
            keys = [
                *(self._q_for_pri(queue, step) for queue, step in order),
                self.unacked_key,
                self.unacked_index_key,
            ]
            holds = ["0" if queue in unacknowledged else "1" for queue, _ in order]
            connection.send_command("EVAL", POP_AND_HOLD, len(keys), *keys, repr(time.time()), *holds)
            self.__dict__[_PENDING] = _POP
        self._in_poll = connection
        self._brpop_sent_at = time.monotonic()
        return None

    return brpop_start


def _brpop_read(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def brpop_read(self: Any, **options: Any) -> Any:
        pending = self.__dict__.pop(_PENDING, None)
        if pending is None or not _atomic(self):
            return original(self, **options)
        try:
            try:
                reply = self.client.parse_response(self.client.connection, "BRPOP", **options)
            except self.connection_errors:
                self.client.connection.disconnect()  # the next poll reconnects
                raise
            except ResponseError as error:  # an error reply, not a lost connection: nothing was popped
                if pending != _POP:
                    raise
                self.__dict__[_ATOMIC] = False  # from the next poll on, kombu's own BRPOP
                logger.warning(
                    "Redis refused the delivery script (%s): this channel takes messages with kombu's "
                    "BRPOP, and a worker killed between its pop and its unacked write loses that message",
                    error,
                )
                raise Empty() from error
            # a token, or the wait ran out: pop next time; a pop that found nothing: wait next time
            self.__dict__[_FOUND_NONE] = pending == _POP and not reply
            if pending == _WAIT or not reply:
                raise Empty()
            source, item, *held = reply
            queue = text_of(source).rsplit(self.sep, 1)[0]
            self._queue_cycle.rotate(queue)
            held_tags = {text_of(tag) for tag in held}
            tags: set[str] = self.__dict__.setdefault(_HELD, set())
            tags |= held_tags  # QoS.append keeps them in memory only
            try:
                self.connection._deliver(_loads(text_of(item)), queue)
            finally:
                tags -= held_tags
            return True
        finally:
            self._in_poll = None
            self._flush_brpop_reauth()  # as kombu's own read does: the connection is idle now

    return brpop_read


def _basic_consume(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def basic_consume(self: Any, queue: str, *args: Any, **kwargs: Any) -> Any:
        no_ack = kwargs.get("no_ack", args[0] if args else False)
        unacknowledged: set[str] = self.__dict__.setdefault(_UNACKNOWLEDGED, set())
        if no_ack:
            unacknowledged.add(queue)
        else:
            unacknowledged.discard(queue)
        return original(self, queue, *args, **kwargs)

    return basic_consume


def _append(original: Callable[..., Any]) -> Callable[..., Any]:
    """``QoS.append``: a message the script held is only noted in memory (kombu would write the
    same copy to ``unacked`` again, one more round trip per message)."""
    remember: Callable[..., Any] = VirtualQoS.append

    @functools.wraps(original)
    def append(self: Any, message: Any, delivery_tag: str) -> Any:
        if delivery_tag in self.channel.__dict__.get(_HELD, ()):
            return remember(self, message, delivery_tag)
        return original(self, message, delivery_tag)

    return append


def install_atomic_delivery(kombu_version: tuple[int, ...] = tuple(kombu.VERSION[:2])) -> bool:
    """Patch kombu's Redis channel class (idempotent); whether it carries the patch afterwards.

    A kombu outside :data:`KOMBU_VERSIONS`, or without the Redis client library, is left as it is."""
    transport = kombu_redis()
    if transport is None or not version_within(kombu_version, KOMBU_VERSIONS):
        return False
    channel = transport.Channel
    if not getattr(channel, _INSTALLED, False):
        patches = {
            "_put": _put,
            "basic_consume": _basic_consume,
            "_brpop_start": _brpop_start,
            "_brpop_read": _brpop_read,
        }
        for name, patch in patches.items():
            setattr(channel, name, patch(getattr(channel, name)))
        qos: Any = transport.QoS
        qos.append = _append(qos.append)
        setattr(channel, _INSTALLED, True)
    return True

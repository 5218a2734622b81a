"""The worker's edge: what a task message must be before anything in the worker touches it.

A worker's main process decodes each message, builds Celery's request from it
and pickles the request for a pool child. A message that breaks any of these
steps used to stop the whole worker (``Unrecoverable error``), and the broker
then handed the same message to the next worker (celery/celery#7975,
celery/celery#4308): a JSON object or a two-item list as the body
(``ValueError`` in ``celery/worker/request.py``), kwargs nested 900 levels deep
(``RecursionError`` while pickling in ``celery/concurrency/asynpool.py``), a
task name that is not a string. A body the worker could not decode (too deep
for the JSON decoder, or a pickle or YAML content type) was dropped with a log
line, and its sender waited on ``result.get()`` for ever.

:func:`check_message` looks at a message once, without recursion, before
Celery's strategy does: the headers Celery's main process reads have the types
it expects, the body is at most :data:`MAX_BODY_BYTES`, decodes (JSON only),
is the protocol-2 triple ``[args list, kwargs object, embed object]``, and
neither the args, the kwargs nor the headers nest deeper than
:data:`MAX_DEPTH` levels (the args list or kwargs object itself is level 1).
What it finds wrong is a :class:`Rejection`, with the reason in words.
:mod:`agentloop.orchestration.celery_adapter.edge_consumer` is what the worker does with
one: acknowledge the message, fail its result and record the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from agentloop.orchestration.wire import (
    DEFERRALS_HEADER,
    LAUNCH,
    MAX_VERSIONS_AHEAD,
    WIRE_HEADER,
    WIRE_VERSION,
    wire_version_of,
)

__all__ = [
    "DELIVERY_COUNT_HEADER",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "MAX_EMBED_DEPTH",
    "MAX_ID_CHARS",
    "Rejection",
    "check_message",
    "delivery_count",
    "describe",
    "nests_deeper_than",
    "past_delivery_limit",
    "rejection_of",
]

#: How deep a message's args, kwargs or headers may nest (a list or object is one level).
MAX_DEPTH = 64
#: How deep Celery's own part of the body (callbacks, chain, chord) may nest: canvases nest deeper.
MAX_EMBED_DEPTH = 256
#: The largest body a worker takes, in bytes as it arrives (8 MiB).
MAX_BODY_BYTES = 8 * 1024 * 1024
#: The header RabbitMQ's quorum queues put on a message: how often it came back unacknowledged.
DELIVERY_COUNT_HEADER = "x-delivery-count"
#: The longest task id, task name or run id the edge records anything under (the run store's key size).
MAX_ID_CHARS = 255
_MAX_REASON_CHARS = 500

_OPTIONAL_TEXT_HEADERS = ("root_id", "parent_id", "group", "shadow", "argsrepr", "kwargsrepr", "lang")
_PROTOCOL = "not a task protocol 2 body ([args list, kwargs object, embed object or null])"


@dataclass(frozen=True, kw_only=True, slots=True)
class Rejection:
    """Why a message was refused, and what it names that a failure can be recorded under.

    ``task`` and ``task_id`` are ``None`` when the headers do not carry a usable
    one. ``run_id`` is the run an ``agentloop.launch`` would have started (its
    ``run_id`` kwarg when readable, else its task id); ``runnable`` its name when readable.
    ``exhausted`` marks a well-formed message refused because it reached its delivery limit
    (:func:`past_delivery_limit`): its ``args`` and ``kwargs`` are kept, for its task's own
    failure path to end its run.
    """

    reason: str
    task: str | None = None
    task_id: str | None = None
    run_id: str | None = None
    runnable: str | None = None
    exhausted: bool = False
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] | None = None


def _sane_id(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS else None


#: The types that hold nothing, known without an ``isinstance`` check (a message is mostly these).
_LEAVES = frozenset({str, int, float, bool, type(None)})


def nests_deeper_than(value: Any, limit: int) -> bool:
    """Whether lists, tuples and mappings in ``value`` nest more than ``limit`` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict or (kind not in _LEAVES and isinstance(item, Mapping)):
            children: Any = item.values()
        elif kind is list or kind is tuple or (kind not in _LEAVES and isinstance(item, list | tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if type(child) not in _LEAVES)
    return False


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _header_problem(headers: Mapping[str, Any], reads_up_to: int) -> str | None:
    """What is wrong with the headers Celery's main process reads, or ``None``."""
    if _sane_id(headers.get("task")) is None:
        return f"the task name header is not a string of 1 to {MAX_ID_CHARS} characters"
    if _sane_id(headers.get("id")) is None:
        return f"the task id header is not a string of 1 to {MAX_ID_CHARS} characters"
    for name in _OPTIONAL_TEXT_HEADERS:
        if not isinstance(headers.get(name), str | None):
            return f"the {name!r} header is not a string"
    timelimit = headers.get("timelimit")
    if timelimit is not None and not (
        isinstance(timelimit, list | tuple)
        and len(timelimit) == 2
        and all(limit is None or _is_number(limit) for limit in timelimit)
    ):
        return "the 'timelimit' header is not [soft seconds or null, hard seconds or null]"
    retries = headers.get("retries")
    if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)):
        return "the 'retries' header is not an integer"
    if not isinstance(headers.get("ignore_result"), bool | None):
        return "the 'ignore_result' header is not a boolean"
    version = wire_version_of(headers)
    if version is None:
        return f"the {WIRE_HEADER!r} header (its wire version) is not a positive integer"
    if version > reads_up_to + MAX_VERSIONS_AHEAD:
        return (
            f"the {WIRE_HEADER!r} header (its wire version) is more than {MAX_VERSIONS_AHEAD} above "
            f"this worker's ({reads_up_to}): no release sends it"
        )
    deferrals = headers.get(DEFERRALS_HEADER, 0)
    if isinstance(deferrals, bool) or not isinstance(deferrals, int) or deferrals < 0:
        return f"the {DEFERRALS_HEADER!r} header is not a non-negative integer"
    if nests_deeper_than(dict(headers), MAX_DEPTH):
        return f"the headers are nested deeper than {MAX_DEPTH} levels"
    return None


def _body_problem(body: Any) -> str | None:
    """What is wrong with a decoded body, or ``None``."""
    if not (isinstance(body, list | tuple) and len(body) == 3):
        return _PROTOCOL
    args, kwargs, embed = body
    if not isinstance(args, list | tuple) or not isinstance(kwargs, Mapping):
        return _PROTOCOL
    if not isinstance(embed, Mapping | None) or not all(isinstance(key, str) for key in kwargs):
        return _PROTOCOL
    if nests_deeper_than(args, MAX_DEPTH) or nests_deeper_than(kwargs, MAX_DEPTH):
        return f"its args or kwargs are nested deeper than {MAX_DEPTH} levels"
    if embed is not None and nests_deeper_than(embed, MAX_EMBED_DEPTH):
        return f"its callbacks, chain or chord are nested deeper than {MAX_EMBED_DEPTH} levels"
    return None


def _body_size(message: Any) -> int:
    body = message.body
    if isinstance(body, str):
        return len(body.encode("utf-8", errors="surrogatepass"))
    return len(body) if isinstance(body, bytes | bytearray | memoryview) else 0


def _decoded(message: Any) -> tuple[Any, str | None]:
    """The decoded body, or the reason it cannot be decoded (kombu caches it for Celery's strategy)."""
    try:
        return message.payload, None
    except Exception as error:  # DecodeError, ContentDisallowed, RecursionError inside the decoder, ...
        kind = message.content_type or "no content type"
        return None, f"its body cannot be decoded ({kind}): {type(error).__name__}: {error}"


def rejection_of(message: Any, reason: str, body: Any = None) -> Rejection:
    """A :class:`Rejection` of ``message`` for ``reason``, with whatever it names that is usable."""
    headers = message.headers if isinstance(message.headers, Mapping) else {}
    task, task_id = _sane_id(headers.get("task")), _sane_id(headers.get("id"))
    run_id = runnable = None
    if task == LAUNCH and task_id is not None:
        kwargs = body[1] if isinstance(body, list | tuple) and len(body) == 3 else None
        kwargs = kwargs if isinstance(kwargs, Mapping) else {}
        given = kwargs.get("run_id")
        run_id = task_id if given is None else _sane_id(given)
        runnable = _sane_id(kwargs.get("runnable"))
    return Rejection(
        reason=reason[:_MAX_REASON_CHARS],
        task=task,
        task_id=task_id,
        run_id=run_id,
        runnable=runnable,
    )


def check_message(message: Any, reads_up_to: int = WIRE_VERSION) -> Rejection | None:
    """``None`` when ``message`` may go on to Celery, else why not (never raises, never recurses).

    ``reads_up_to`` is the worker's wire version: a message more than
    :data:`~agentloop.orchestration.wire.MAX_VERSIONS_AHEAD` above it is refused."""
    headers = message.headers
    if not isinstance(headers, Mapping):
        return Rejection(reason="the message has no headers object")
    problem = _header_problem(headers, reads_up_to)
    if problem is not None:
        return rejection_of(message, problem)
    size = _body_size(message)
    if size > MAX_BODY_BYTES:
        return rejection_of(message, f"its body is larger than {MAX_BODY_BYTES} bytes ({size})")
    body, problem = _decoded(message)
    if problem is None:
        problem = _body_problem(body)
    return None if problem is None else rejection_of(message, problem, body)


def delivery_count(message: Any) -> int:
    """How often ``message`` came back unacknowledged before this delivery (RabbitMQ's quorum
    queues say so in :data:`DELIVERY_COUNT_HEADER`; 0 on other brokers)."""
    headers = message.headers if isinstance(message.headers, Mapping) else {}
    count = headers.get(DELIVERY_COUNT_HEADER)
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def past_delivery_limit(message: Any, limit: int) -> Rejection | None:
    """``None`` unless a message that :func:`check_message` let through came back ``limit`` times
    or more: then RabbitMQ (``x-delivery-limit``) will not deliver it again, and this, its last
    delivery, is not run (whatever killed its workers would kill this one) but refused, its run
    ended ``failed`` with :class:`~agentloop.orchestration.errors.DeliveryLimitError`."""
    count = delivery_count(message)
    if count < limit:
        return None
    body = message.payload  # decoded and checked already: a protocol-2 triple
    reason = (
        f"it came back unacknowledged {count} times (delivery limit {limit}): each worker that "
        "took it died or lost its connection before it ended, so it is not run again"
    )
    return replace(
        rejection_of(message, reason, body), exhausted=True, args=tuple(body[0]), kwargs=dict(body[1])
    )


def describe(rejection: Rejection) -> str:
    """The error message a rejected task's sender and its run record get."""
    name = rejection.task or "a message"
    return f"{name} message rejected at the worker's edge: {rejection.reason}"

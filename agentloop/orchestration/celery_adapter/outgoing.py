"""What a worker sends on to the rest of a run is checked against the edge's limits first.

Every worker refuses a message whose args or kwargs nest deeper than
:data:`~agentloop.orchestration.celery_adapter.edge.MAX_DEPTH` levels, or whose body is
larger than :data:`~agentloop.orchestration.celery_adapter.edge.MAX_BODY_BYTES`
(``edge.py``). Refused there, an internal message of a running run would only
fail its own result. So before a task sends the canvas of a pipeline or a
composite (``canvas.py``), :func:`check_canvas` estimates each message the
canvas starts with, and before a task hands an output on, :func:`check_output`
checks it (:func:`check_outputs` a pack's outputs, each and their total: they
travel on together, as the pack's one result): a message that would be refused raises
:class:`UnsendableMessageError` instead, and the task's failure ends the run
with that error (``run_failures.py``), nothing sent.

A message's body is estimated as the JSON of its args and kwargs plus those of
everything it carries: the rest of its chain, and for a branch of a composite
the merge (and what follows it). An output travels inside the next task's
args, at most three levels down (a bounded composite's merge gets lists of
lanes' lists), so it may nest :data:`MAX_DEPTH` minus three levels. What
Celery itself assembles later is not checked here: the merge's list of all the
branches' outputs together, and the chain the replaced task was part of.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from celery import Signature

from agentloop.orchestration.celery_adapter.edge import MAX_BODY_BYTES, MAX_DEPTH, nests_deeper_than
from agentloop.orchestration.errors import UnsendableMessageError

__all__ = ["MAX_OUTPUT_DEPTH", "check_canvas", "check_output", "check_outputs"]

#: How deep an output handed on to the next task may nest.
MAX_OUTPUT_DEPTH = MAX_DEPTH - 3


def _size(signature: Signature) -> int:
    """The bytes of one task's own part of a message: its args and kwargs as JSON."""
    return _json_bytes([list(signature.args), dict(signature.kwargs)])


def _json_bytes(value: Any) -> int:
    """The size of ``value`` as kombu's JSON (ASCII; dates, ids and decimals as strings)."""
    return len(json.dumps(value, default=str))


def _members(signature: Signature) -> list[Signature]:
    return list(signature.tasks)


def _total(signature: Signature) -> int:
    """The bytes of a whole canvas's args and kwargs."""
    name = signature.get("task")
    if name in ("celery.chain", "celery.group"):
        return sum(_total(member) for member in _members(signature))
    if name == "celery.chord":
        return sum(_total(member) for member in _members(signature)) + _total(signature.body)
    return _size(signature)


def _first_messages(signature: Signature, carried: int = 0) -> Iterator[tuple[Signature, int]]:
    """Each message ``signature`` starts with and the estimated size of its body, which carries
    ``carried`` bytes of what follows it."""
    name = signature.get("task")
    if name == "celery.chain":
        first, *rest = _members(signature)
        yield from _first_messages(first, carried + sum(_total(step) for step in rest))
    elif name == "celery.chord":
        body = _total(signature.body)
        for member in _members(signature):
            yield from _first_messages(member, carried + body)
    elif name == "celery.group":
        for member in _members(signature):
            yield from _first_messages(member, carried)
    else:
        yield signature, _size(signature) + carried


def _signatures(signature: Signature) -> Iterator[Signature]:
    """Every task signature of a canvas."""
    name = signature.get("task")
    if name in ("celery.chain", "celery.group", "celery.chord"):
        for member in _members(signature):
            yield from _signatures(member)
        if name == "celery.chord":
            yield from _signatures(signature.body)
    else:
        yield signature


def check_canvas(canvas: Signature) -> None:
    """Raise :class:`UnsendableMessageError` when a message of ``canvas`` would be refused."""
    for signature in _signatures(canvas):
        if nests_deeper_than(list(signature.args), MAX_DEPTH) or nests_deeper_than(
            dict(signature.kwargs), MAX_DEPTH
        ):
            raise UnsendableMessageError(
                f"its {signature.task} message would be refused at the workers' edge: "
                f"its args are nested deeper than {MAX_DEPTH} levels"
            )
    for signature, size in _first_messages(canvas):
        if size > MAX_BODY_BYTES:
            raise UnsendableMessageError(
                f"its {signature.task} message would be refused at the workers' edge: "
                f"its body would be about {size} bytes, more than {MAX_BODY_BYTES}"
            )


def check_output(value: Any, task: str) -> None:
    """Raise :class:`UnsendableMessageError` when ``value``, the output of ``task``, cannot travel on."""
    if nests_deeper_than(value, MAX_OUTPUT_DEPTH):
        raise UnsendableMessageError(
            f"the output of {task} cannot be handed on: it is nested deeper than {MAX_OUTPUT_DEPTH} "
            "levels (the next task's message would be refused at the workers' edge)"
        )
    _check_size(value, f"the output of {task} cannot be handed on: it is")


def check_outputs(values: list[Any], task: str) -> None:
    """Raise :class:`UnsendableMessageError` when one of ``values``, the outputs of ``task`` (a
    pack's branches), cannot travel on, or when together, as the one result they travel in, they
    are larger than a message may be."""
    for value in values:
        check_output(value, task)
    _check_size(values, f"the outputs of {task} cannot be handed on: together they are")


def _check_size(value: Any, says: str) -> None:
    try:
        size = _json_bytes(value)
    except ValueError:  # a circular value: the result's serializer says so, as before
        return
    if size > MAX_BODY_BYTES:
        raise UnsendableMessageError(
            f"{says} {size} bytes as JSON, "
            f"more than the {MAX_BODY_BYTES} a message may have (it would be refused at the workers' edge)"
        )

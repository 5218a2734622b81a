"""A runnable's concurrency rule: which key a run counts against, how many of the key's runs may be
in flight across all workers, and what a run past that limit does (``docs/how-to/fairness.md``).

The key of a run is the launch's ``concurrency_key`` keyword when the message gives one, else
what the rule's ``key`` function says of the run's input and context spec, else none (the run is
not limited). Every branch and stage of the run counts under its root's key: a key is a run's,
never a task's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentloop.orchestration.errors import LaunchRequestError
from agentloop.orchestration.wire import check_name

__all__ = ["ON_LIMIT", "Concurrency", "OnLimit", "key_of", "weight_of"]

#: What a run does when its key has ``limit`` runs in flight: ``wait`` for a slot in the order the
#: runs arrived (without holding a worker slot), ``refuse`` (the run fails with
#: :class:`~agentloop.orchestration.errors.ConcurrencyLimitError`), or ``cancel_oldest`` (the key's
#: oldest run in flight is cancelled, and this one takes its slot).
OnLimit = Literal["wait", "refuse", "cancel_oldest"]
ON_LIMIT: tuple[OnLimit, ...] = ("wait", "refuse", "cancel_oldest")

KeyRule = Callable[[Any, Mapping[str, Any]], "str | None"]
"""``key(input, context_spec)``: the run's key (e.g. the tenant id in its context), or ``None``."""

WeightRule = Callable[[str], int]
"""``weight(key)``: the key's weight in the fair share (e.g. from the tenant's plan)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Concurrency:
    """How a registered runnable's runs share the fleet (``register(..., concurrency=...)``).

    ``limit`` bounds the runs of one key in flight across all workers (``None``: only the fair
    share bounds them); ``on_limit`` says what a run past it does (:data:`OnLimit`); ``key``
    derives a run's key from its input and context spec when its launch names none. ``weight``
    (a positive integer, or a function of the key giving one) is the key's part of the fair share
    (``AGENTLOOP_FAIR_SLOTS``) against the other keys with work: a key of weight 2 holds twice the
    slots of a key of weight 1 while both wait. Every key weighs 1 by default (round-robin).
    ``branch_limit`` bounds the key's branch tasks running at once across all workers (the tasks
    of the nodes below a composite, of every run of the key): a branch task past it is parked
    and woken as a launch is (``None``: only ``limit`` bounds the key's work).
    """

    limit: int | None = None
    branch_limit: int | None = None
    on_limit: OnLimit = "wait"
    key: KeyRule | None = None
    weight: int | WeightRule = 1

    def __post_init__(self) -> None:
        if self.limit is not None:
            _positive(self.limit, "a concurrency limit")
        if self.branch_limit is not None:
            _positive(self.branch_limit, "a branch limit")
        if self.on_limit not in ON_LIMIT:
            raise ValueError(f"on_limit must be one of {', '.join(ON_LIMIT)}, got {self.on_limit!r}")
        if self.key is not None and not callable(self.key):
            raise TypeError("a concurrency key rule must be a function of (input, context_spec)")
        if not callable(self.weight):
            _positive(self.weight, "a concurrency weight")


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return value


def weight_of(rule: Concurrency | None, key: str) -> int:
    """The weight of ``key`` in the fair share under ``rule`` (1 without one). A weight function
    that raises or answers something else than a positive integer is a bug of the rule:
    :class:`~agentloop.orchestration.errors.LaunchRequestError` saying so."""
    if rule is None:
        return 1
    if not callable(rule.weight):
        return rule.weight
    try:
        return _positive(rule.weight(key), "the concurrency weight rule's answer")
    except Exception as error:
        raise LaunchRequestError(f"the concurrency weight rule failed: {type(error).__name__}") from error


def key_of(
    rule: Concurrency | None, *, given: str | None, input: Any, context: Mapping[str, Any]
) -> str | None:
    """The key a run counts against: ``given`` (the launch's), else the rule's word on the run.

    A rule that raises, or answers something that is not a name the run store keeps, is a bug of
    the rule: :class:`~agentloop.orchestration.errors.LaunchRequestError` saying so (the launch
    fails with it, never runs unlimited)."""
    if given is not None:
        return given
    if rule is None or rule.key is None:
        return None
    try:
        found = rule.key(input, context)
    except Exception as error:
        raise LaunchRequestError(f"the concurrency key rule failed: {type(error).__name__}") from error
    if found is None:
        return None
    return check_name(found, "the concurrency key")

"""Fair shares: how many of one key's runs may hold a slot while other keys have work too.

Without a fleet-wide number of slots (``AGENTLOOP_FAIR_SLOTS``) a key is bounded by its own limit
alone. With one, while several keys have runs in flight or waiting, each key holds at most its
weighted part of the slots: ``max(1, slots * weight // total)``, ``total`` the weights of the keys
that have work (every weight 1 by default: ``slots // n`` for ``n`` keys, round-robin), and never
more than its own limit. Max-min fairness: one key's batch of thousands takes the fleet only
while no other key has work, and a key that starts sending gets its share as the first key's runs
end. Within a key, runs are admitted in the order they arrived.

A waiting run holds no worker slot: it is parked in the store with its launch message, and the
end of a run of its key (or of any key, under fair shares) sends it at once
(``celery_adapter/admission.py``). :func:`backstop_seconds` is how long a parked run waits before
its own message asks again, should the wake be lost.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["admits", "backstop_seconds", "effective_limit", "share_of"]

#: The backstop of the run at the head of its key's line, and the longest of any.
FIRST_BACKSTOP, LAST_BACKSTOP = 10.0, 300.0
#: Seconds more per limit's worth of runs waiting before a run.
BACKSTOP_PER_ROUND = 10.0


def share_of(key: str, fair_slots: int | None, weights: Mapping[str, int]) -> int | None:
    """The slots ``key`` may hold under fair shares, while the keys of ``weights`` (each with its
    weight, ``key`` among them) have work (``None``: no fleet-wide bound)."""
    if fair_slots is None:
        return None
    own = max(1, weights.get(key, 1))
    total = sum(max(1, weight) for name, weight in weights.items() if name != key) + own
    return max(1, fair_slots * own // total)


def effective_limit(limit: int | None, share: int | None) -> int | None:
    """The most runs of one key that may hold a slot now: its limit or its share, the lower
    (``None``: no bound)."""
    if limit is None:
        return share
    return limit if share is None else min(limit, share)


def admits(*, held: int, ahead: int, limit: int | None) -> bool:
    """Whether a run with ``ahead`` runs of its key waiting before it may take a slot while
    ``held`` of the key's runs hold one, under ``limit`` (:func:`effective_limit`)."""
    return limit is None or held + ahead < limit


def backstop_seconds(ahead: int, limit: int | None) -> float:
    """How long a parked run waits before its own message asks again, in case its wake was lost
    (the process that freed the slot died before sending it): 10 s at the head of its key's
    line, 10 s more per limit's worth of runs before it, at most 5 minutes. Only a lost wake
    makes a run wait this long: the thousands at the back of a batch ask a few times a minute."""
    rounds = ahead / max(1, limit or 1)
    return min(LAST_BACKSTOP, FIRST_BACKSTOP + BACKSTOP_PER_ROUND * rounds)

"""Fair shares: how many of one key's runs may hold a slot while other keys have work too.

Without a fleet-wide number of slots (``AGENTLOOP_FAIR_SLOTS``) a key is bounded by its own limit
alone. With one, while ``n`` keys have runs in flight or waiting, each key holds at most
``max(1, slots // n)`` (and never more than its own limit): max-min fairness, so one key's batch
of thousands takes the fleet only while no other key has work, and a key that starts sending gets
its share as the first key's runs end. Within a key, runs are admitted in the order they arrived.
"""

from __future__ import annotations

__all__ = ["admits", "effective_limit"]


def effective_limit(limit: int | None, fair_slots: int | None, active_keys: int) -> int | None:
    """The most runs of one key that may hold a slot now (``None``: no bound)."""
    share = None if fair_slots is None else max(1, fair_slots // max(1, active_keys))
    if limit is None:
        return share
    return limit if share is None else min(limit, share)


def admits(*, held: int, ahead: int, limit: int | None) -> bool:
    """Whether a run with ``ahead`` runs of its key waiting before it may take a slot while
    ``held`` of the key's runs hold one, under ``limit`` (:func:`effective_limit`)."""
    return limit is None or held + ahead < limit

"""Whether an internal task may run the node it was sent: well-formed, owned, of a run still going.

Only the canvas a launch builds carries the run's owner token (``orchestration/runtime/launches.py``),
in every :class:`~agentloop.orchestration.wire.WorkflowNode` it sends. :meth:`RunGate.admit` lets a node
through to the engine only when:

* it is a well-formed node (else :class:`~agentloop.orchestration.errors.InvalidNodeError`);
* its run exists (else :class:`~agentloop.orchestration.errors.RunNotFoundError`) and the node holds the
  token of the launch that owns it (else :class:`~agentloop.orchestration.errors.RunOwnershipError`): a
  forged node runs no code, writes no event, no loop result, no checkpoint. A run created
  without an owner (by a release before run owners) admits any node, as ``finish_run`` does;
* the run has not ended (else :class:`~agentloop.orchestration.errors.RunAlreadyEndedError`): an ended
  run's record never changes, so a task of it that comes late (a redelivery, a sibling of a
  failed fail-fast branch) runs nothing (``celery_adapter/tasks.py`` says what it returns).

A run's owner never changes, so it is read once per run and process (and read again, at most
once every ``interval`` seconds per run and process, when a node's token does not match it: the
run may have been pruned and its id launched anew, a new run with a new owner; forged tokens
cost the store no more than that); whether the run has ended
is read at most every ``interval`` seconds per run and process (an ended run stays ended), like
the cancel flag (``store/seams.py``): a task pays no extra round trip in the common case. When a
task needs both (the first task of a run in a process), they are one read
(``run_owner_and_status``); an ended run's record is read then, to say how it ended.
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar
from weakref import WeakKeyDictionary

from agentloop.orchestration.errors import RunAlreadyEndedError, RunNotFoundError, RunOwnershipError
from agentloop.orchestration.store import TERMINAL_STATUSES, RunOwner, RunStore
from agentloop.orchestration.store.seams import _answers_of
from agentloop.orchestration.wire import WorkflowNode

__all__ = ["RunGate"]


class RunGate:
    """The check every internal task's node passes before the engine sees it (see the module doc)."""

    _owners: ClassVar[WeakKeyDictionary[RunStore, dict[str, RunOwner | None]]] = WeakKeyDictionary()
    _going: ClassVar[WeakKeyDictionary[RunStore, dict[str, float]]] = WeakKeyDictionary()
    _reread: ClassVar[WeakKeyDictionary[RunStore, dict[str, float]]] = WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, store: RunStore, *, interval: float = 0.5) -> None:
        self.store, self.interval = store, interval

    def admit(self, data: Any) -> WorkflowNode:
        """The node ``data`` carries, when its task may run it; else the error saying why not."""
        node = WorkflowNode.from_dict(data)
        status = self._read_both(node.run_id)
        self.check_owner(node.run_id, node.owner_token)
        self._check_going(node.run_id, status)
        return node

    def _read_both(self, run_id: str) -> str | None:
        """The run's status, read with its owner (kept for :meth:`check_owner`) when this process
        does not know the owner yet; ``None`` when it does (nothing is read)."""
        with self._lock:
            if run_id in _answers_of(self._owners, self.store):
                return None
        owner, status = self.store.run_owner_and_status(run_id)  # RunNotFoundError for an unknown run
        with self._lock:
            _answers_of(self._owners, self.store)[run_id] = owner
        return status

    def check_owner(self, run_id: str, token: str | None) -> None:
        """:class:`~agentloop.orchestration.errors.RunOwnershipError` unless ``token`` is the run owner's."""
        owner = self._owner(run_id)
        if owner is not None and not owner.holds(token) and self._may_reread(run_id):
            # read again: the run this process saw may have been pruned and its id launched anew
            owner = self._owner(run_id, cached=False)
        if owner is not None and not owner.holds(token):
            raise RunOwnershipError(run_id)

    def _may_reread(self, run_id: str) -> bool:
        """Whether ``run_id``'s owner may be read again now (once per ``interval``)."""
        now = time.monotonic()
        with self._lock:
            reread = _answers_of(self._reread, self.store)
            if now - reread.get(run_id, -self.interval) < self.interval:
                return False
            reread[run_id] = now
        return True

    def _owner(self, run_id: str, *, cached: bool = True) -> RunOwner | None:
        with self._lock:
            owners = _answers_of(self._owners, self.store)
            if cached and run_id in owners:
                return owners[run_id]
        owner = self.store.run_owner(run_id)  # RunNotFoundError for a run that does not exist
        with self._lock:
            _answers_of(self._owners, self.store)[run_id] = owner
        return owner

    def _check_going(self, run_id: str, status: str | None = None) -> None:
        """:class:`RunAlreadyEndedError` when the run has ended (``status``: read just now, else
        read here unless known for ``interval``); the record of an ended run is read to say how."""
        now = time.monotonic()
        with self._lock:
            seen_at = _answers_of(self._going, self.store).get(run_id)
            if seen_at is not None and now - seen_at < self.interval:
                return
        if status is None:
            status = self.store.run_owner_and_status(run_id)[1]  # RunNotFoundError for an unknown run
        if status not in TERMINAL_STATUSES:
            with self._lock:
                _answers_of(self._going, self.store)[run_id] = now
            return
        record = self.store.get_run(run_id)
        if record is None:
            raise RunNotFoundError(run_id)
        if record.is_finished:
            raise RunAlreadyEndedError(record)
        with self._lock:
            _answers_of(self._going, self.store)[run_id] = now

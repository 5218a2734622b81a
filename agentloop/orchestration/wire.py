"""The wire contract: task names, what a message says, and how a collected failure travels.

Task names are public and stable. Other services, importing only Celery::

    result = send_task("agentloop.launch", kwargs={"runnable": NAME, "input": JSON,
                       "context": JSON (optional), "run_id": str (optional),
                       "token_budget": int (optional),
                       "deadline_seconds": number (optional),
                       "record": bool (optional),
                       "concurrency_key": str (optional), "priority": 0-9 (optional)})
    send_task("agentloop.progress", kwargs={"run_id": result.id, "after_id": 0}).get()
    send_task("agentloop.cancel", kwargs={"run_id": result.id})
    result.get()   # its result; a degraded run's {"__agentloop_degraded__": DegradedBody}

The launch's task id is the run id (pass ``task_id=run_id`` when you choose the
run id). ``agentloop.progress`` answers a ``status``: the run's
(:class:`~agentloop.orchestration.store.RunStatus`), ``"pending"`` while the launch is
on its way (a producer marked the id :data:`LAUNCH_SENT_STATE` in the result
backend before sending it, as :class:`~agentloop.orchestration.client.CeleryAgentRunner`
does, and no worker has recorded the run yet), or :data:`RUN_NOT_FOUND` when
nothing is known of the id. A message the worker refuses (see
``celery_adapter/edge.py``) fails its result at once with
``celery.exceptions.InvalidTaskError``, and a refused launch is a failed run.

A :class:`WorkflowNode` is the piece of a workflow one task runs: a
*registered* runnable, the run it belongs to, its path in the workflow, the
JSON context spec the worker rebuilds the context from, and the chain of
:class:`Ancestor` values that lets the task that fails report the failure the
way the in-process engine does, at every enclosing level (and whether it is
``fresh``: see ``celery_adapter/deliveries.py``).

Inside a branch of a composite whose policy is ``collect``, a failure is a
value, not an exception: the failing task returns a :class:`BranchFailure`
(on the wire ``{"__agentloop_failure__": {...}}``) that later tasks pass along
until the composite at ``capture`` (its path) turns it into a failed
:class:`~pipelines.BranchResult`.

This module imports neither Celery nor the store: clients depend on it alone.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from agentloop.orchestration.errors import InvalidNodeError, LaunchRequestError

LAUNCH = "agentloop.launch"
RUN = "agentloop.run"
STAGE = "agentloop.stage"
PIPELINE_DONE = "agentloop.pipeline_done"
MERGE = "agentloop.merge"
#: A composite's branch run in a lane (its ``max_concurrency`` bounds the lanes), and the task
#: that adds an expanded branch's output to its lane's.
LANE = "agentloop.lane"
LANE_COLLECT = "agentloop.lane_collect"
#: Several loop branches of one composite run together in one task, on one event loop
#: (the packing rule, the composite's ``pack_size``, or ``AGENTLOOP_PACK_SIZE``;
#: ``docs/how-to/packing.md``).
PACK = "agentloop.pack"
#: A pack's outputs with those of its branches that left it to wait for a person put in their
#: places (wire version 2; ``celery_adapter/canvas.py``).
PACK_COLLECT = "agentloop.pack_collect"
#: Consecutive loop and action stages of one pipeline run one after another in one task, each
#: recorded as it ends (wire version 2; the rule: ``docs/how-to/packing.md#pipelines``).
STAGES = "agentloop.stages"
FINALIZE = "agentloop.finalize"
PROGRESS = "agentloop.progress"
CANCEL = "agentloop.cancel"
#: Answer the question a paused run waits for, and continue it (``orchestration/celery_adapter/pause.py``,
#: ``orchestration/store/waits.py``).
RESUME = "agentloop.resume"
#: Send on the paused tasks of questions settled and never resumed (beat runs it every minute).
RESUME_SETTLED = "agentloop.resume_settled"
BATCH = "agentloop.batch"
BATCH_CHUNK = "agentloop.batch_chunk"
BATCH_SUMMARY = "agentloop.batch_summary"
#: Runs of one batch chunk launched together on one event loop, each its own run (wire version 2;
#: ``celery_adapter/batch_packs.py``).
BATCH_PACK = "agentloop.batch_pack"
#: The health check: it answers ``"pong"`` as soon as a worker takes it.
PING = "agentloop.ping"
#: Delete the ended runs older than the retention (``AGENTLOOP_RUN_RETENTION``; beat runs it hourly).
PRUNE_RUNS = "agentloop.prune_runs"
#: Every task name of the contract.
TASK_NAMES: tuple[str, ...] = (
    LAUNCH,
    RUN,
    STAGE,
    PIPELINE_DONE,
    MERGE,
    LANE,
    LANE_COLLECT,
    FINALIZE,
    PROGRESS,
    CANCEL,
)
TASK_NAMES += (RESUME, RESUME_SETTLED, BATCH, BATCH_CHUNK, BATCH_SUMMARY, PING, PRUNE_RUNS, PACK, BATCH_PACK)
TASK_NAMES += (PACK_COLLECT, STAGES)

#: The version of the wire contract this code speaks: what its messages mean (the task names, their
#: kwargs, the :class:`WorkflowNode` and its results). Raised when a message changes in a way an
#: older worker would misread; a worker runs every message of its version or below, and hands a
#: newer one on to a newer worker (``celery_adapter/wire_versions.py``, ``docs/deployment.md``).
WIRE_VERSION = 2
#: The wire version a message needs (:func:`needed_version`): 1 for every message version 1 knew,
#: :data:`KEYS_VERSION` for one that carries a concurrency key or a priority (issue 39): a worker
#: of version 1 would refuse such a launch, or run such a node unlimited, so it parks them instead.
KEYS_VERSION = 2
#: The launch keywords and node fields a worker of version 1 does not know.
KEYS_FIELDS = ("concurrency_key", "priority")
#: The wire version from which workers run ``agentloop.pack`` and ``agentloop.stages`` (packing is
#: the default from it).
#: A pack is sent to the holding queue of this version (``celery_adapter/canvas.py``), which
#: only workers of this version or newer consume: a worker of a release before it never sees one.
PACK_WIRE_VERSION = 2
#: The tasks only workers of :data:`PACK_WIRE_VERSION` or newer run.
PACK_TASKS = frozenset({PACK, BATCH_PACK, PACK_COLLECT, STAGES})
#: The message header that carries the wire version of an ``agentloop.*`` message. A message
#: without it is version 1 (what every producer sent before the header existed, and what a
#: client sending with Celery alone sends): it is always accepted.
WIRE_HEADER = "agentloop_wire"
#: The header counting how many times older workers handed the message on (to its queue, by
#: releases before holding queues were parked in at once, or to its holding queue).
DEFERRALS_HEADER = "agentloop_wire_deferrals"
#: How far above a worker's own wire version a message's may be and still be a message of a newer
#: release (parked for a newer worker). A deploy raises the version by one; four leaves room for
#: rolling several releases at once. A message further ahead is malformed (a forged or corrupted
#: header) and refused at the worker's edge, never parked: a holding queue per forged value
#: would let any sender create queues without bound.
MAX_VERSIONS_AHEAD = 4


def wire_version_of(headers: Mapping[str, Any]) -> int | None:
    """The wire version a message's ``headers`` say (1 without the header); ``None`` when the
    header is there but not a positive integer."""
    version = headers.get(WIRE_HEADER, 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        return None
    return version


def needed_version(args: Any, kwargs: Any, name: Any = None) -> int:
    """The lowest wire version that reads a message of task ``name`` with ``args`` and ``kwargs``:
    :data:`PACK_WIRE_VERSION` for a pack's task (a release before packs by default has none of
    them), :data:`KEYS_VERSION` when its keywords, or a node among its arguments or keywords,
    carry a field of :data:`KEYS_FIELDS`, else 1."""
    if name in PACK_TASKS:
        return PACK_WIRE_VERSION
    keywords = kwargs if isinstance(kwargs, Mapping) else {}
    arguments = args if isinstance(args, list | tuple) else ()
    for value in (keywords, *keywords.values(), *arguments):
        if isinstance(value, Mapping) and any(value.get(name) is not None for name in KEYS_FIELDS):
            return KEYS_VERSION
    return 1


FAILURE_KEY = "__agentloop_failure__"

#: The Celery state a producer writes for a launch's id in the result backend just before it
#: sends the launch, so ``agentloop.progress`` can answer ``pending`` until a worker records the run.
LAUNCH_SENT_STATE = "SENT"
#: ``agentloop.progress``'s status for a run that was sent but not recorded yet (also a recorded,
#: not yet started run's status).
RUN_PENDING = "pending"
#: ``agentloop.progress``'s status for an id nothing is known of.
RUN_NOT_FOUND = "not_found"
#: The Celery states of a launch on its way: sent, or taken by a worker that has not recorded the run yet.
_LAUNCH_ON_ITS_WAY = frozenset({LAUNCH_SENT_STATE, "RECEIVED", "STARTED", "RETRY", "PROGRESS"})


def progress_status(recorded: str | None, launch_state: str | None) -> str:
    """The ``status`` ``agentloop.progress`` answers for a run id.

    ``recorded`` is the run's status in the run store (``None`` without a
    record); ``launch_state`` the id's Celery state in the result backend.
    Without a record the run is :data:`RUN_PENDING` while its launch is on its
    way, else :data:`RUN_NOT_FOUND`.
    """
    if recorded is not None:
        return recorded
    return RUN_PENDING if launch_state in _LAUNCH_ON_ITS_WAY else RUN_NOT_FOUND


#: Most events one ``agentloop.progress`` page holds (a larger ``limit`` is cut to it).
MAX_PROGRESS_EVENTS = 5000


def progress_page(after_id: Any, limit: Any) -> tuple[int, int]:
    """``agentloop.progress``'s ``after_id`` and ``limit`` as whole numbers (``limit`` cut to 1 to
    :data:`MAX_PROGRESS_EVENTS`); :class:`LaunchRequestError` saying which is not a count of events.

    A count may come as an integer or as its decimal string (what a client parsing a URL sends)."""
    return _count(after_id, "after_id", least=0), min(_count(limit, "limit", least=1), MAX_PROGRESS_EVENTS)


def _count(value: Any, what: str, *, least: int) -> int:
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        # a refused value is never quoted (it may be anything a client had): a number, or its type
        shown = str(value) if isinstance(value, int) and not isinstance(value, bool) else type(value).__name__
        raise LaunchRequestError(f"{what} must be a whole number of at least {least}, got {shown}")
    return value


#: Longest run id and runnable name the contract accepts (what the run store keeps of them).
MAX_NAME_CHARS = 255
#: The priorities a launch may ask for: Celery's 0 (first) to 9 (last); a batch's runs get 9.
MAX_PRIORITY = 9
#: Largest ``token_budget`` (a signed 64-bit count).
MAX_TOKEN_BUDGET = 2**63 - 1
#: A NUL character as JSON writes it: ``\u0000`` after an even number of backslashes.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def check_name(value: Any, what: str) -> str:
    """``value`` when it is a name the run store keeps (a non-empty string of at most
    :data:`MAX_NAME_CHARS` characters, no NUL); :class:`LaunchRequestError` saying why not."""
    if not isinstance(value, str) or not value:
        raise LaunchRequestError(f"{what} must be a non-empty string, got {type(value).__name__}")
    if "\x00" in value:
        raise LaunchRequestError(f"{what} must not contain a NUL character")
    if len(value) > MAX_NAME_CHARS:
        raise LaunchRequestError(f"{what} is {len(value)} characters long; at most {MAX_NAME_CHARS} allowed")
    return value


def _check_json(value: Any, what: str) -> None:
    """:class:`LaunchRequestError` unless ``value`` is JSON that every database stores."""
    try:
        text = json.dumps(value, allow_nan=False)
    except RecursionError:
        raise LaunchRequestError(f"{what} is nested too deeply") from None
    except (TypeError, ValueError) as error:
        raise LaunchRequestError(f"{what} must be JSON data: {error}") from None
    if _JSON_NUL.search(text):
        raise LaunchRequestError(f"{what} contains a NUL character, which no database stores")


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchRequest:
    """The keyword arguments of ``agentloop.launch``, checked."""

    runnable: str
    input: Any = None
    context: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    token_budget: int | None = None
    #: The whole run's deadline, counted from when a worker starts the run.
    deadline_seconds: float | None = None
    #: Who started it over HTTP (``agentloop serve``): only its tokens and ``admin`` ones reach it.
    principal: str | None = None
    #: Record the run (its model turns, tool results, answers, cache hits) for ``agentloop replay``.
    record: bool = False
    #: The key the run counts against for fair shares and limits (a tenant), inherited by every
    #: branch and stage (``orchestration/fairness/``); else the runnable's rule decides.
    concurrency_key: str | None = None
    #: The run's priority, 0 (first) to :data:`MAX_PRIORITY`; every task of the run is sent with it.
    priority: int | None = None

    @classmethod
    def parse(
        cls,
        *,
        runnable: Any,
        input: Any = None,
        context: Any = None,
        run_id: Any = None,
        token_budget: Any = None,
        deadline_seconds: Any = None,
        principal: Any = None,
        record: Any = None,
        concurrency_key: Any = None,
        priority: Any = None,
    ) -> LaunchRequest:
        """The request, or :class:`LaunchRequestError` saying which field is wrong.

        Every field is checked against what the run store keeps before any
        database sees it: names of at most :data:`MAX_NAME_CHARS` characters, no
        NUL character anywhere, a budget below 2**63.
        """
        check_name(runnable, "runnable")
        if run_id is not None:
            check_name(str(run_id) if type(run_id) is int else run_id, "run_id")
        _check_json(input, "input")
        if context is not None and not isinstance(context, Mapping):
            raise LaunchRequestError(f"the context spec must be a JSON object, got {type(context).__name__}")
        if token_budget is not None and (
            isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 0
        ):
            raise LaunchRequestError(f"token_budget must be a non-negative integer, got {token_budget!r}")
        if token_budget is not None and token_budget > MAX_TOKEN_BUDGET:
            raise LaunchRequestError(f"token_budget must be at most {MAX_TOKEN_BUDGET}, got {token_budget}")
        if deadline_seconds is not None and (
            isinstance(deadline_seconds, bool)
            or not isinstance(deadline_seconds, int | float)
            or not math.isfinite(deadline_seconds)
            or deadline_seconds <= 0
        ):
            raise LaunchRequestError(f"deadline_seconds must be a positive number, got {deadline_seconds!r}")
        if principal is not None:
            check_name(principal, "principal")
        if record is not None and not isinstance(record, bool):
            raise LaunchRequestError(f"record must be true or false, got {record!r}")
        if concurrency_key is not None:
            check_name(concurrency_key, "concurrency_key")
        if priority is not None and (
            isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= MAX_PRIORITY
        ):
            raise LaunchRequestError(
                f"priority must be an integer from 0 to {MAX_PRIORITY}, got {priority!r}"
            )
        return cls(
            runnable=str(runnable),
            input=input,
            context=dict(context or {}),
            run_id=None if run_id is None else str(run_id),
            token_budget=token_budget,
            deadline_seconds=None if deadline_seconds is None else float(deadline_seconds),
            principal=principal,
            record=bool(record),
            concurrency_key=concurrency_key,
            priority=priority,
        )

    def to_kwargs(self) -> dict[str, Any]:
        """The message's keyword arguments (optional fields only when set)."""
        kwargs: dict[str, Any] = {"runnable": self.runnable, "input": self.input}
        kwargs["context"] = dict(self.context)
        optional = ("run_id", "token_budget", "deadline_seconds", "principal", "concurrency_key", "priority")
        kwargs |= {name: getattr(self, name) for name in optional if getattr(self, name) is not None}
        return kwargs | ({"record": True} if self.record else {})


@dataclass(frozen=True, kw_only=True, slots=True)
class Ancestor:
    """An enclosing pipeline (``position`` = stage index) or composite (``position`` = branch key)."""

    kind: Literal["pipeline", "composite"]
    runnable: str
    path: str
    position: str
    width: int = 0
    fail_fast: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "runnable": self.runnable,
            "path": self.path,
            "position": self.position,
            "width": self.width,
            "fail_fast": self.fail_fast,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ancestor:
        kind = data["kind"]
        if kind not in ("pipeline", "composite"):
            raise ValueError(f"unknown ancestor kind {kind!r}")
        return cls(
            kind=kind,
            runnable=str(data["runnable"]),
            path=str(data["path"]),
            position=str(data["position"]),
            width=int(data.get("width", 0)),
            fail_fast=bool(data.get("fail_fast", True)),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowNode:
    """The piece of a workflow one task runs (see the module docstring)."""

    run_id: str
    runnable: str
    path: str = ""
    context: Mapping[str, Any] = field(default_factory=dict)
    ancestors: tuple[Ancestor, ...] = ()
    capture: str | None = None  # path of the collecting composite that owns failures, if any
    #: The run's deadline as an epoch time (``time.time()``), the same for every task of the run:
    #: monotonic clocks differ between processes, so each task converts it to its own.
    deadline: float | None = None
    #: The secret of the launch that owns the run (:class:`~agentloop.orchestration.store.RunOwner`): a task
    #: ends the run only with it. Never shown: not by ``repr``, Flower nor the worker's logs.
    owner_token: str | None = field(default=None, repr=False)
    #: No task ran this node before, so its start reads no store (``celery_adapter/deliveries.py``).
    fresh: bool = False
    #: The run is recorded: the task records what its steps get (``actions/recording.py``).
    record: bool = False
    #: The run's concurrency key (its launch's, or its runnable's rule's): every task of the run
    #: counts its model calls against the key's limits (``orchestration/fairness/``).
    concurrency_key: str | None = None
    #: The priority every task of the run is sent with (``None``: the broker's default).
    priority: int | None = None

    def child(self, *, runnable: str, segment: str, parent: Ancestor) -> WorkflowNode:
        path = f"{self.path}/{segment}" if self.path else segment
        capture = self.capture
        if parent.kind == "composite" and not parent.fail_fast:
            capture = parent.path
        return WorkflowNode(  # not dataclasses.replace: a composite makes one per branch
            run_id=self.run_id,
            runnable=runnable,
            path=path,
            context=self.context,
            ancestors=(*self.ancestors, parent),
            capture=capture,
            deadline=self.deadline,
            owner_token=self.owner_token,
            fresh=self.fresh,
            record=self.record,
            concurrency_key=self.concurrency_key,
            priority=self.priority,
        )

    def to_dict(self) -> dict[str, Any]:
        data = {
            "run_id": self.run_id,
            "runnable": self.runnable,
            "path": self.path,
            "context": dict(self.context),
            "ancestors": [a.to_dict() for a in self.ancestors],
            "capture": self.capture,
            "deadline": self.deadline,
        }
        if self.owner_token is not None:
            data["owner_token"] = self.owner_token
        if self.fresh:
            data["fresh"] = True
        if self.record:
            data["record"] = True
        if self.concurrency_key is not None:  # only when set: a message of wire version 2
            data["concurrency_key"] = self.concurrency_key
        if self.priority is not None:
            data["priority"] = self.priority
        return data

    @classmethod
    def from_dict(cls, data: Any) -> WorkflowNode:
        if not isinstance(data, Mapping):
            raise InvalidNodeError("a workflow node must be a JSON object")
        try:
            return cls(
                run_id=str(data["run_id"]),
                runnable=str(data["runnable"]),
                path=str(data.get("path", "")),
                context=dict(
                    _typed(data.get("context") or {}, Mapping, "context spec must be a JSON object")
                ),
                ancestors=tuple(Ancestor.from_dict(a) for a in data.get("ancestors", ())),
                capture=data.get("capture"),
                deadline=_epoch_or_none(data.get("deadline")),
                owner_token=_typed(
                    data.get("owner_token"), (str, type(None)), "owner token must be a string"
                ),
                fresh=_typed(data.get("fresh", False), bool, "'fresh' must be true or false"),
                record=_typed(data.get("record", False), bool, "'record' must be true or false"),
                concurrency_key=_typed(
                    data.get("concurrency_key"), (str, type(None)), "concurrency key must be a string"
                ),
                priority=_priority_or_none(data.get("priority")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InvalidNodeError(f"a malformed workflow node: {type(error).__name__}: {error}") from None


def packed_branches(data: Any) -> list[tuple[str, str, Any]]:
    """The ``branches`` of an ``agentloop.pack`` message, ``[[runnable, key, input], ...]``, checked:
    :class:`InvalidNodeError` saying what is malformed."""
    if not isinstance(data, list | tuple) or not data:
        raise InvalidNodeError("a pack's branches must be a non-empty JSON list")
    branches = []
    for entry in data:
        if not (isinstance(entry, list | tuple) and len(entry) == 3):
            raise InvalidNodeError("each packed branch must be a list [runnable, key, input]")
        runnable, key, value = entry
        if not isinstance(runnable, str) or not runnable:
            raise InvalidNodeError("a packed branch's runnable must be a non-empty string")
        if not isinstance(key, str) or not key or "/" in key or "\\" in key:
            raise InvalidNodeError("a packed branch's key must be a non-empty string without '/' or '\\'")
        branches.append((runnable, key, value))
    return branches


def _typed(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if isinstance(value, kind):
        return value
    raise ValueError(f"its {what}, not a {type(value).__name__}")


def _priority_or_none(value: Any) -> int | None:
    if value is None or (
        isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_PRIORITY
    ):
        return value
    raise ValueError(f"its priority must be an integer from 0 to {MAX_PRIORITY}")


def _epoch_or_none(value: Any) -> float | None:
    if value is None or (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ):
        return None if value is None else float(value)
    raise ValueError(f"its deadline must be an epoch time, not a {type(value).__name__}")


@dataclass(frozen=True, kw_only=True, slots=True)
class BranchFailure:
    """A failure inside a ``collect`` composite, travelling as a value to the composite at ``capture``."""

    capture: str
    type: str
    message: str

    @classmethod
    def of(cls, error: BaseException, *, capture: str) -> BranchFailure:
        return cls(capture=capture, type=type(error).__name__, message=str(error))

    @property
    def error(self) -> dict[str, str]:
        """What the merge sees in the failed :class:`~pipelines.BranchResult`."""
        return {"type": self.type, "message": self.message}

    def to_wire(self) -> dict[str, Any]:
        return {FAILURE_KEY: {"capture": self.capture, "type": self.type, "message": self.message}}

    @classmethod
    def from_wire(cls, value: Any) -> BranchFailure | None:
        """The failure ``value`` carries, or ``None`` when it is an ordinary output."""
        if not (isinstance(value, dict) and len(value) == 1 and isinstance(value.get(FAILURE_KEY), dict)):
            return None
        body = value[FAILURE_KEY]
        return cls(capture=str(body["capture"]), type=str(body["type"]), message=str(body["message"]))


DEGRADED_KEY = "__agentloop_degraded__"


# The typed shape of a degraded run's result, for clients that import only Celery:
# ``result.get()`` answers ``{DEGRADED_KEY: DegradedBody}``; ``status`` is the run record's (the one
# ``agentloop.progress`` answers), ``error`` the error the run record keeps.
class DegradedFailure(TypedDict):
    """One model call that failed: the step, why, and where in the workflow."""

    action: str
    reason: str
    path: str


class DegradedError(TypedDict):
    """A degraded run's error, as its run record keeps it (``agentloop.progress``'s ``error``)."""

    type: Literal["ModelUnavailable"]
    message: str
    failures: list[DegradedFailure]


class DegradedBody(TypedDict):
    """What a degraded run's result holds under ``"__agentloop_degraded__"``."""

    status: Literal["degraded"]
    output: Any
    error: DegradedError


@dataclass(frozen=True, kw_only=True, slots=True)
class DegradedResult:
    """What the task of a run that ended ``degraded`` returns: the run's ``output`` with its
    status and ``error`` (the model failures), so ``result.get()``, Flower and the worker's log
    show that the run degraded. On the wire ``{"__agentloop_degraded__": {"status": "degraded",
    "output": ..., "error": {"type": "ModelUnavailable", "message", "failures"}}}``;
    :meth:`~agentloop.orchestration.client.RunHandle.wait` returns the ``output`` alone, and
    :attr:`~agentloop.orchestration.client.RunHandle.status` says ``degraded``
    (typed: :class:`DegradedBody`)."""

    output: Any
    error: Mapping[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {DEGRADED_KEY: {"status": "degraded", "output": self.output, "error": dict(self.error)}}

    @classmethod
    def from_wire(cls, value: Any) -> DegradedResult | None:
        """The degraded result ``value`` carries, or ``None`` when it is an ordinary output."""
        if not (isinstance(value, dict) and len(value) == 1 and isinstance(value.get(DEGRADED_KEY), dict)):
            return None
        body = value[DEGRADED_KEY]
        error = body.get("error")
        return cls(output=body.get("output"), error=dict(error) if isinstance(error, Mapping) else {})

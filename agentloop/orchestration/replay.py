"""Recorded runs as one JSON file, and their replay against the code as it is now.

A :class:`RunRecording` is a recorded run (``record=True``, ``--record``,
``AGENTLOOP_RECORD_RUNS``; ``actions/recording.py``) in one value: the runnable's
name, its input, its context spec, the output it ended with, and its entries.
:meth:`RunRecording.from_store` reads one from a run store, :meth:`RunRecording.to_store`
puts one into another, :meth:`~RunRecording.save` and :meth:`~RunRecording.load` write and
read the file (``agentloop runs export`` / ``agentloop runs import``).

:func:`replay` runs the recording's runnable in this process with the
:class:`ReplayTap` as the run's recording tap: every model turn is answered with the
recorded reply at its place (path, iteration, order), so no model is called; a
person's answers and the step-cache hits come from the recording too; every other
step (your code, your tools) runs for real, and no connection may leave this
machine while it runs (:func:`no_network`). The :class:`ReplayReport` says where the
new code's requests first differ from the recorded ones in what the model receives
(the step and the fields that changed, a field either side alone has included; not the
marker ``agentloop tools sync`` puts on a stored tool schema, which no processor sends),
which recorded turns it never asked for, and how its output differs from the recorded
output; :attr:`ReplayReport.ok` is ``False`` on any difference.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentloop.actions.human import Question
from agentloop.actions.model import AiResponse, ModelRequest
from agentloop.actions.recording import CACHE_HIT, HUMAN, MCP_CALL, MODEL, RUN, RecordedEntry, json_data
from agentloop.actions.typed import tool_content
from agentloop.loops.contract import Runnable
from agentloop.loops.runner import InlineAgentRunner
from agentloop.orchestration.errors import NetworkBlockedError, RunNotFoundError
from agentloop.orchestration.llm.base import BaseProcessor
from agentloop.orchestration.llm.request_guard import LOCAL_HOSTS, model_requests
from agentloop.orchestration.registry import RunnableRegistry

if TYPE_CHECKING:  # the store's modules load on use: the testing kit imports this module
    from agentloop.orchestration.store import RunStore

__all__ = [
    "FORMAT",
    "Divergence",
    "FieldChange",
    "ReplayProcessor",
    "ReplayReport",
    "ReplayTap",
    "RunRecording",
    "field_changes",
    "model_receives",
    "no_network",
    "replay",
]

#: What a recording file says it is, and the version of its shape.
FORMAT, VERSION = "agentloop.recording", 1
#: The status of a recording that does not say how its run ended (``RunStatus.SUCCEEDED``).
SUCCEEDED = "succeeded"
#: How many changed fields a divergence lists at most.
MAX_CHANGES = 20


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecording:
    """A recorded run, as one JSON file holds it (module doc)."""

    run_id: str
    runnable: str
    input: Any = None
    context: Mapping[str, Any] = field(default_factory=dict)
    status: str = SUCCEEDED
    output: Any = None
    entries: tuple[RecordedEntry, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "run": {
                "id": self.run_id,
                "runnable": self.runnable,
                "input": self.input,
                "context": dict(self.context),
                "status": self.status,
                "output": self.output,
            },
            "entries": [entry.to_dict() for entry in self.entries],
        }

    @classmethod
    def from_dict(cls, data: Any) -> RunRecording:
        """The recording :meth:`to_dict` wrote; ``ValueError`` saying what is wrong otherwise."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError(f"not an agentloop recording (its 'format' must be {FORMAT!r})")
        if data.get("version") != VERSION:
            raise ValueError(
                f"a recording of version {data.get('version')!r}; this agentloop reads {VERSION}"
            )
        run, entries = data.get("run"), data.get("entries")
        if not isinstance(run, Mapping) or not isinstance(entries, list):
            raise ValueError("a recording needs a 'run' object and an 'entries' list")
        if not isinstance(run.get("id"), str) or not isinstance(run.get("runnable"), str):
            raise ValueError("a recording's run needs an 'id' and a 'runnable'")
        context = run.get("context") or {}
        if not isinstance(context, Mapping):
            raise ValueError("a recording's context spec must be a JSON object")
        return cls(
            run_id=run["id"],
            runnable=run["runnable"],
            input=run.get("input"),
            context=dict(context),
            status=str(run.get("status") or SUCCEEDED),
            output=run.get("output"),
            entries=tuple(RecordedEntry.from_dict(entry) for entry in entries),
        )

    # the file

    def save(self, path: str | Path) -> None:
        """Write the recording to ``path`` as JSON."""
        Path(path).write_text(
            json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )

    @classmethod
    def load(cls, path: str | Path) -> RunRecording:
        """The recording in file ``path``; ``ValueError`` for one that is not (``OSError`` when it
        cannot be read)."""
        text = Path(path).read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except ValueError as error:
            raise ValueError(f"{path} is not JSON: {error}") from None
        return cls.from_dict(data)

    # the store

    @classmethod
    def from_store(cls, store: RunStore, run_id: str) -> RunRecording:
        """Run ``run_id`` and its recording; :class:`RunNotFoundError` when there is no such run,
        ``ValueError`` when it was not recorded."""
        from agentloop.orchestration.store.recordings import recording_store_for

        record = store.get_run(run_id)
        recordings = recording_store_for(store)
        if record is None:
            raise RunNotFoundError(run_id)
        if not record.is_root:  # a task's run: the recording is its workflow's
            record = store.get_run(record.root_run_id) or record
        entries = recordings.entries(record.root_run_id) if recordings is not None else []
        if not entries:
            raise ValueError(f"run {run_id} was not recorded (launch it with record=True or --record)")
        meta = next((entry for entry in entries if entry.kind == RUN), None)
        context = meta.data.get("context") if meta is not None else None
        return cls(
            run_id=record.id,
            runnable=record.runnable,
            input=record.input,
            context=dict(context) if isinstance(context, Mapping) else {},
            status=record.status,
            output=record.output,
            entries=tuple(entry for entry in entries if entry.kind != RUN),
        )

    def to_store(self, store: RunStore) -> None:
        """Keep this recording in ``store`` as run :attr:`run_id` (an ended run of its runnable),
        its entries replacing any recorded under that id. ``ValueError`` when the id names a run of
        another runnable, or one that has not ended."""
        from agentloop.orchestration.store import TERMINAL_STATUSES
        from agentloop.orchestration.store.recordings import recording_store_for

        recordings = recording_store_for(store)
        if recordings is None:
            raise ValueError(f"{type(store).__name__} keeps no recordings")
        record = store.get_run(self.run_id)
        if record is None:
            store.create_run(run_id=self.run_id, runnable=self.runnable, input=self.input)
            status = self.status if self.status in TERMINAL_STATUSES else SUCCEEDED
            store.finish_run(self.run_id, status=status, output=self.output)
        elif record.runnable != self.runnable or not record.is_finished:
            why = "has not ended" if record.is_finished is False else f"is a run of {record.runnable!r}"
            raise ValueError(f"run {self.run_id} exists and {why}: import under another id")
        recordings.delete(self.run_id)
        meta = RecordedEntry(path="", iteration=0, kind=RUN, seq=0, data={"context": dict(self.context)})
        recordings.add(self.run_id, [meta, *self.entries])


# ----- the differences ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class FieldChange:
    """One field that differs: its path in the value (``history_messages[2].content``), what the
    recording holds and what the replay produced (``None`` where a side has no such field)."""

    field: str
    recorded: Any
    replayed: Any

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "recorded": self.recorded, "replayed": self.replayed}


_MISSING: Any = object()


def field_changes(recorded: Any, replayed: Any, *, prefix: str = "") -> list[FieldChange]:
    """The fields in which two JSON values differ, in order, each named by its path."""
    changes: list[FieldChange] = []

    def walk(old: Any, new: Any, where: str) -> None:
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            for key in [*old, *(k for k in new if k not in old)]:
                walk(old.get(key, _MISSING), new.get(key, _MISSING), f"{where}.{key}" if where else str(key))
        elif isinstance(old, list) and isinstance(new, list):
            for index in range(max(len(old), len(new))):
                walk(
                    old[index] if index < len(old) else _MISSING,
                    new[index] if index < len(new) else _MISSING,
                    f"{where}[{index}]",
                )
        elif old != new or type(old) is not type(new):
            changes.append(
                FieldChange(
                    field=where or "(the value)",
                    recorded=None if old is _MISSING else old,
                    replayed=None if new is _MISSING else new,
                )
            )

    walk(json_data(recorded), json_data(replayed), prefix)
    return changes


def model_receives(request: Any) -> Any:
    """What the model receives of a request as a recording keeps it (``ModelRequest.to_dict``):
    the request with its tools' content only, without the marker ``agentloop tools sync`` puts on a
    stored schema (:func:`~agentloop.actions.typed.tool_content`), which no processor sends. A
    replay compares these, so a sync on one side only is no divergence."""
    request = json_data(request)
    if not isinstance(request, dict) or not isinstance(request.get("tools"), list):
        return request
    tools = [tool_content(tool) if isinstance(tool, Mapping) else tool for tool in request["tools"]]
    return {**request, "tools": tools}


@dataclass(frozen=True, kw_only=True, slots=True)
class Divergence:
    """Where the replay left the recording: the step (``path``, ``iteration``, the model call's
    ``seq``), what happened (``reason``) and the request fields that changed."""

    path: str
    iteration: int
    seq: int
    reason: str
    changes: tuple[FieldChange, ...] = ()

    @property
    def where(self) -> str:
        return f"step {self.path or '(root)'!r}, iteration {self.iteration}, model call {self.seq}"

    def describe(self) -> str:
        lines = [f"{self.where}: {self.reason}"]
        lines += [
            f"  {change.field}: {_short(change.recorded)} -> {_short(change.replayed)}"
            for change in self.changes
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "iteration": self.iteration,
            "seq": self.seq,
            "reason": self.reason,
            "changes": [change.to_dict() for change in self.changes],
        }


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayReport:
    """What a replay found (module doc). ``error`` is why the replayed run failed, if it did."""

    run_id: str
    runnable: str
    divergences: tuple[Divergence, ...] = ()
    output_changes: tuple[FieldChange, ...] = ()
    output: Any = None
    recorded_output: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the replay matched: the same requests, the same output, no failure."""
        return not self.divergences and not self.output_changes and self.error is None

    @property
    def first_divergence(self) -> Divergence | None:
        return self.divergences[0] if self.divergences else None

    def describe(self) -> str:
        """The report for people, one finding a paragraph."""
        name = f"replay of run {self.run_id} ({self.runnable})"
        if self.ok:
            return f"{name}: matches its recording (the same model requests, the same output)"
        lines = [f"{name}: differs from its recording"]
        first = self.first_divergence
        if first is not None:
            lines.append(f"first divergence at {first.describe()}")
            if len(self.divergences) > 1:
                lines.append(f"({len(self.divergences) - 1} more divergence(s) after it)")
        if self.error is not None:
            lines.append(f"the replayed run failed: {self.error}")
        if self.output_changes:
            lines.append("the output differs:")
            lines += [
                f"  {change.field}: {_short(change.recorded)} -> {_short(change.replayed)}"
                for change in self.output_changes[:MAX_CHANGES]
            ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "runnable": self.runnable,
            "ok": self.ok,
            "divergences": [divergence.to_dict() for divergence in self.divergences],
            "output_changes": [change.to_dict() for change in self.output_changes],
            "output": self.output,
            "recorded_output": self.recorded_output,
            "error": self.error,
        }


# ----- the tap -----------------------------------------------------------------------------------


class ReplayTap:
    """The recording tap of a replay: each model turn is answered with the reply recorded at its
    place, and compared with the recorded request; nothing is recorded and no model is called.

    A turn the recording does not have is answered with a failure (``replay: no recorded reply``)
    and noted; :meth:`unasked` lists the recorded turns the replay never reached.
    """

    def __init__(self, entries: Sequence[RecordedEntry]) -> None:
        self._turns = {(e.path, e.iteration, e.seq): e for e in entries if e.kind == MODEL}
        self._calls = {(e.path, e.iteration, e.seq): e for e in entries if e.kind == MCP_CALL}
        self._asked: set[tuple[str, int, int]] = set()
        self._lock = threading.Lock()
        self.divergences: list[Divergence] = []
        self.cache_entries = {
            str(e.data.get("key")): str(e.data.get("entry")) for e in entries if e.kind == CACHE_HIT
        }
        self._answers: dict[str, deque[Any]] = defaultdict(deque)
        for entry in entries:
            if entry.kind == HUMAN:
                self._answers[str(entry.data.get("key"))].append(entry.data.get("answer"))

    async def model_turn(
        self, request: ModelRequest, *, place: RecordedEntry, send: Callable[[], Awaitable[AiResponse]]
    ) -> AiResponse:
        """The reply recorded at ``place``; ``request`` compared with the recorded one on what the
        model receives (:func:`model_receives`)."""
        key = (place.path, place.iteration, place.seq)
        recorded = self._turns.get(key)
        with self._lock:
            self._asked.add(key)
            if recorded is None:
                reason = "a model request the recording does not have"
                replayed = model_receives(request.to_dict())
                self._note(place, reason, [FieldChange(field="request", recorded=None, replayed=replayed)])
                return AiResponse.failure(f"replay: no recorded reply for {place.where()}")
            changes = field_changes(
                model_receives(recorded.data.get("request")), model_receives(request.to_dict())
            )
            if changes:
                self._note(place, "the request differs from the recorded one", changes)
        return AiResponse.from_dict(recorded.data.get("response") or {})

    def answer_call(self, place: RecordedEntry, request: Mapping[str, Any]) -> Any:
        """The outcome of the outside call (an MCP tool call) recorded at ``place``; nothing is
        called. A call the recording does not have is answered as a server away, and noted."""
        recorded = self._calls.get((place.path, place.iteration, place.seq))
        with self._lock:
            if recorded is None:
                reason = "an MCP call the recording does not have"
                self._note(
                    place, reason, [FieldChange(field="request", recorded=None, replayed=dict(request))]
                )
                return {
                    "status": "unavailable",
                    "reason": f"replay: no recorded MCP result for {place.where()}",
                }
            changes = field_changes(recorded.data.get("request"), dict(request))
            if changes:
                self._note(place, "the MCP call differs from the recorded one", changes)
        return recorded.data.get("outcome")

    def record(self, entry: RecordedEntry) -> None:
        """A replay records nothing."""

    def _note(self, place: RecordedEntry, reason: str, changes: list[FieldChange]) -> None:
        self.divergences.append(
            Divergence(
                path=place.path,
                iteration=place.iteration,
                seq=place.seq,
                reason=reason,
                changes=tuple(changes[:MAX_CHANGES]),
            )
        )

    def unasked(self) -> list[Divergence]:
        """The recorded turns the replay never asked for, as divergences."""
        with self._lock:
            missing = sorted(set(self._turns) - self._asked)
        return [
            Divergence(
                path=path,
                iteration=iteration,
                seq=seq,
                reason="the recording has a model request the replay never sent",
                changes=(
                    FieldChange(
                        field="request",
                        recorded=model_receives(self._turns[(path, iteration, seq)].data.get("request")),
                        replayed=None,
                    ),
                ),
            )
            for path, iteration, seq in missing
        ]

    def answer(self, question: Question) -> Any:
        """The recorded answer to ``question`` (by its key, in the order they were given)."""
        answers = self._answers.get(question.key)
        if not answers:
            raise LookupError(
                f"the recording has no answer to the question {question.key!r} ({question.prompt!r})"
            )
        return answers.popleft()


class ReplayProcessor(BaseProcessor):
    """The processor of a replay's context when none is given: a replay answers every turn from
    its recording before a processor is asked, so a turn that reaches this one was not (it is
    answered with a failure, and no model is called)."""

    model_name = "replay"

    async def process(self, request: ModelRequest) -> AiResponse:
        return AiResponse.failure("replay: a model turn outside a replay's recording", model=self.model_name)


class ReplayCache:
    """The step cache of a replay: the recorded hits hit, everything else misses; nothing is kept."""

    def __init__(self, entries: Mapping[str, str]) -> None:
        self.entries = dict(entries)

    def get(self, key: str) -> str | None:
        return self.entries.get(key)

    def set(self, key: str, value: str, *, ttl: float) -> None:
        """A replay keeps nothing."""


# ----- the network -------------------------------------------------------------------------------


def _is_local(address: Any) -> bool:
    host = str(address[0] if isinstance(address, tuple) else address).lower()
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


class _NetworkBlock:
    """The replays' block on the network, counted: the first replay to start puts the checking
    ``socket.connect`` / ``connect_ex`` in place, the last to end puts the originals back, and
    each holds the model-request guard (:meth:`ModelRequestGuard.holding`, counted too). So
    replays that overlap, in threads, ending in any order or raising, leave the process exactly
    as it was once the last one ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._originals: tuple[Any, Any] | None = None
        self._installed: tuple[Any, Any] | None = None

    @property
    def depth(self) -> int:
        """How many blocks are held now."""
        with self._lock:
            return self._depth

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._install()
            self._depth += 1
        try:
            with model_requests.holding(hint="a replay answers model requests from its recording"):
                yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._uninstall()

    def _install(self) -> None:
        original, original_ex = socket.socket.connect, socket.socket.connect_ex
        block = self

        def refuse(sock: socket.socket, address: Any) -> None:
            if block._depth and sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
                raise NetworkBlockedError(f"replay: no network; a connection to {address!r} was refused")

        def connect(self: socket.socket, address: Any) -> None:
            refuse(self, address)
            original(self, address)

        def connect_ex(self: socket.socket, address: Any) -> int:
            refuse(self, address)
            return original_ex(self, address)

        self._originals, self._installed = (original, original_ex), (connect, connect_ex)
        socket.socket.connect, socket.socket.connect_ex = connect, connect_ex  # type: ignore[method-assign,assignment]

    def _uninstall(self) -> None:
        if self._originals is None or self._installed is None:
            return
        # put the originals back unless someone patched over ours since (ours is inert at depth 0)
        if (socket.socket.connect, socket.socket.connect_ex) == self._installed:
            socket.socket.connect, socket.socket.connect_ex = self._originals  # type: ignore[method-assign]
            self._originals = self._installed = None


_network_block = _NetworkBlock()


def network_blocked() -> bool:
    """Whether a replay blocks the network now: a transport that the socket check cannot see
    (an MCP server started over stdio, one on this machine) refuses to open while it does."""
    return _network_block.depth > 0


@contextmanager
def no_network() -> Iterator[None]:
    """No connection off this machine inside the block (a replay's): ``socket.connect`` to any
    address but a loopback one raises :class:`NetworkBlockedError`, and the model-request guard
    refuses any model server but a local one. Process-wide while any block lasts; blocks are
    counted, so overlapping replays (in threads, ending in any order, raising) leave the process
    exactly as it was once the last one ends."""
    with _network_block.held():
        yield


# ----- the replay --------------------------------------------------------------------------------


async def replay(
    recording: RunRecording,
    *,
    runnable: type[Runnable] | None = None,
    context: Any = None,
    registry: RunnableRegistry | None = None,
) -> ReplayReport:
    """Run ``recording``'s runnable in this process against its recording (module doc).

    The runnable is ``runnable`` (with ``context``), else the one ``registry`` holds under the
    recording's name, with the context its factory builds from the recorded spec (built before
    the network is blocked). Raises ``LookupError`` (``UnknownRunnableError``) for a name the
    registry does not hold.
    """
    if runnable is None:
        if registry is None:
            raise ValueError("replay needs the runnable, or a registry that holds it")
        registration = registry.get(recording.runnable)
        runnable = registration.runnable
        if context is None:
            context = registration.build_context(recording.context)
    tap = ReplayTap(recording.entries)
    runner = InlineAgentRunner.create(
        runnable=runnable, context=context, cache=ReplayCache(tap.cache_entries)
    )
    output: Any = None
    error: str | None = None
    with no_network():
        try:
            outcome = await runner.request_outcome(
                input=recording.input, run_id=recording.run_id, recording=tap, on_question=tap.answer
            )
            output = json_data(outcome.result)
        except Exception as failure:  # the replayed run failed: a finding, never a crash
            error = f"{type(failure).__name__}: {failure}"
    output_changes = () if error is not None else tuple(field_changes(recording.output, output))
    return ReplayReport(
        run_id=recording.run_id,
        runnable=recording.runnable,
        divergences=(*tap.divergences, *tap.unasked()),
        output_changes=output_changes,
        output=output,
        recorded_output=recording.output,
        error=error,
    )

"""Recording: what a run's steps got from outside their code, kept so the run can be replayed.

A recorded run keeps, in order and by where in the workflow each happened:

- every model turn (``kind`` ``"model"``): the request as the step sent it (a
  :class:`~agentloop.actions.model.ModelRequest` as JSON) and the reply
  (:meth:`~agentloop.actions.model.AiResponse.to_dict`);
- every tool an AI-driven loop performed (``"tool"``: name, arguments, result);
- every answer a person gave (``"human"``: the question and the answer);
- every step-cache hit (``"cache_hit"``: the key and the cached entry);
- every call to a tool server outside the process (``"mcp_call"``: the request and its
  outcome, :func:`outside_call`), which a replay answers without calling the server.

Each :class:`RecordedEntry` is placed by ``(path, iteration, kind, seq)``: the
workflow path of the runnable, the loop iteration (``0`` outside a loop), and
its order among the entries of that kind in that iteration. A loop that resumes
from a checkpoint (on Celery, after a worker died or a person answered) runs its
iteration again and records the same places again: the last take is the one that
produced the result, and a store keeps one entry per place.

Where entries go is the run scope's :class:`RecordingTap` (``loops/scope.py``
installs it with :func:`use_recording` for every runnable inside it, as it does
the degradation sink). Model turns pass through the tap (:func:`model_turn`, which
every processor built on ``orchestration``'s ``BaseProcessor`` calls), so a tap
may also *answer* a turn: the replay tap serves the recorded replies and never
calls the model. Outside a recorded run nothing is recorded and nothing costs.
A tap that fails to record is logged, never a failed step.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.context_binding import Binding
from agentloop.actions.model import AiResponse, ModelRequest
from agentloop.actions.schema import json_output

logger = logging.getLogger(__name__)

MODEL, TOOL, HUMAN, CACHE_HIT = "model", "tool", "human", "cache_hit"
#: A call to an MCP server (``orchestration/mcp``): the request and the outcome the step got.
MCP_CALL = "mcp_call"
#: The run's own entry (its context spec), written once where the run starts.
RUN = "run"
#: The kinds of entry a recording holds.
KINDS = (MODEL, TOOL, HUMAN, CACHE_HIT, RUN, MCP_CALL)


def json_data(value: Any) -> Any:
    """``value`` as JSON data: pydantic models and dataclasses dumped, anything else that is not
    JSON as its ``str`` (a recording is always JSON)."""
    data = json_output(value)
    try:
        return json.loads(json.dumps(data, allow_nan=False))
    except (TypeError, ValueError):
        return str(data)


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedEntry:
    """One thing a step got from outside its code, at ``(path, iteration, kind, seq)`` (module doc)."""

    path: str
    iteration: int
    kind: str
    seq: int
    data: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def place(self) -> tuple[str, int, str, int]:
        """Where it happened: one entry per place."""
        return (self.path, self.iteration, self.kind, self.seq)

    def where(self) -> str:
        """The place for people: ``pipeline/1 iteration 0, model call 2``."""
        kind = {
            MODEL: "model call",
            TOOL: "tool call",
            HUMAN: "answer",
            CACHE_HIT: "cache hit",
            MCP_CALL: "MCP call",
        }
        return (
            f"{self.path or '(root)'} iteration {self.iteration}, {kind.get(self.kind, self.kind)} {self.seq}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "iteration": self.iteration,
            "kind": self.kind,
            "seq": self.seq,
            "data": json_data(dict(self.data)),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecordedEntry:
        """The entry :meth:`to_dict` wrote; ``ValueError`` for one that is not."""
        try:
            kind = str(data["kind"])
            if kind not in KINDS:
                raise ValueError(f"unknown kind {kind!r}; a recording holds {list(KINDS)}")
            body = data.get("data") or {}
            if not isinstance(body, Mapping):
                raise ValueError("its data must be a JSON object")
            return cls(
                path=str(data.get("path") or ""),
                iteration=int(data.get("iteration") or 0),
                kind=kind,
                seq=int(data.get("seq") or 0),
                data=dict(body),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"a malformed recorded entry: {type(error).__name__}: {error}") from None


def model_entry_data(request: ModelRequest, response: AiResponse) -> dict[str, Any]:
    """What a model entry keeps: the request and the reply, as JSON."""
    return {"request": request.to_dict(), "response": response.to_dict()}


@runtime_checkable
class RecordingTap(Protocol):
    """Where a run's recording goes (and, for a replay, where recorded replies come from).

    ``model_turn`` answers one model turn: a recording tap awaits ``send()`` (the real call) and
    records the turn at ``place``; a replay tap answers from its recording. ``record`` keeps any
    other entry. Either may be ``def`` or ``async def``.
    """

    def model_turn(
        self, request: ModelRequest, *, place: RecordedEntry, send: Callable[[], Awaitable[AiResponse]]
    ) -> Awaitable[AiResponse]: ...

    def record(self, entry: RecordedEntry) -> Awaitable[None] | None: ...


class Recorder:
    """The recording tap: every model turn is sent as it is and recorded, with every other entry,
    through ``write`` (a store's, or :class:`InMemoryRecording`'s)."""

    def __init__(self, write: Callable[[RecordedEntry], Awaitable[None] | None]) -> None:
        self.write = write

    async def model_turn(
        self, request: ModelRequest, *, place: RecordedEntry, send: Callable[[], Awaitable[AiResponse]]
    ) -> AiResponse:
        response = await send()
        entry = RecordedEntry(
            path=place.path,
            iteration=place.iteration,
            kind=MODEL,
            seq=place.seq,
            data=model_entry_data(request, response),
        )
        await self.record(entry)
        return response

    async def record(self, entry: RecordedEntry) -> None:
        try:
            await maybe_await(self.write(entry))
        except Exception:  # a recording is observation: it never fails the step
            logger.warning("could not record %s", entry.where(), exc_info=True)


class InMemoryRecording(Recorder):
    """A recording kept in this process (the inline runner's ``record=True``): :attr:`entries`,
    one per place, in order."""

    def __init__(self) -> None:
        super().__init__(self._keep)
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, int, str, int], RecordedEntry] = {}

    def _keep(self, entry: RecordedEntry) -> None:
        with self._lock:
            self._entries[entry.place] = entry

    @property
    def entries(self) -> list[RecordedEntry]:
        """The entries, ordered by place."""
        with self._lock:
            return [self._entries[place] for place in sorted(self._entries)]


class _Places:
    """The next ``seq`` of each kind, at one path and iteration."""

    def __init__(self, tap: RecordingTap, path: str, iteration: int) -> None:
        self.tap, self.path, self.iteration = tap, path, iteration
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def next(self, kind: str) -> RecordedEntry:
        with self._lock:
            seq = self._next.get(kind, 0)
            self._next[kind] = seq + 1
        return RecordedEntry(path=self.path, iteration=self.iteration, kind=kind, seq=seq)


class _Calls:
    """The next ``seq`` of each kind of outside call in one loop iteration, recorded or not
    (:func:`call_place`)."""

    def __init__(self, iteration: int) -> None:
        self.iteration = iteration
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def next(self, kind: str) -> int:
        with self._lock:
            seq = self._next.get(kind, 0)
            self._next[kind] = seq + 1
        return seq


_places: ContextVar[_Places | None] = ContextVar("agentloop_recording", default=None)
_calls: ContextVar[_Calls | None] = ContextVar("agentloop_outside_calls", default=None)
#: Set while a turn is inside the tap: a processor that wraps another records the turn once.
_inside_turn: ContextVar[bool] = ContextVar("agentloop_recording_turn", default=False)


def use_recording(tap: RecordingTap | None, *, path: str = "", iteration: int = 0) -> Binding[_Places | None]:
    """Record what the steps inside the block get (or answer it, for a replay) through ``tap``,
    at workflow ``path`` and loop ``iteration``."""
    return Binding(_places, None if tap is None else _Places(tap, path, iteration))


def recording_iteration(iteration: int) -> _IterationMark:
    """The loop engine's mark: what the block records belongs to ``iteration`` of the current path
    (and the outside calls made inside it are counted from 0, :func:`call_place`)."""
    return _IterationMark(iteration)


class _IterationMark:
    """:func:`recording_iteration`'s block: one object, opened every loop iteration."""

    __slots__ = ("_calls", "_iteration", "_places")

    def __init__(self, iteration: int) -> None:
        self._iteration = iteration
        self._calls: Token[_Calls | None] | None = None
        self._places: Token[_Places | None] | None = None

    def __enter__(self) -> None:
        self._calls = _calls.set(_Calls(self._iteration))
        places = _places.get()
        if places is not None:
            self._places = _places.set(_Places(places.tap, places.path, self._iteration))

    def __exit__(self, *_: object) -> None:
        if self._places is not None:
            _places.reset(self._places)
        if self._calls is not None:
            _calls.reset(self._calls)


def call_place(kind: str) -> tuple[int, int]:
    """``(iteration, seq)`` of the next outside call of ``kind`` here: the loop iteration it is
    made in (``0`` outside a loop) and its order among that iteration's calls of that kind. A
    loop iteration run again (a resumed loop) counts from 0 again, so the same call gets the
    same place; outside a loop every call is ``(0, 0)``."""
    calls = _calls.get()
    if calls is None:
        return 0, 0
    return calls.iteration, calls.next(kind)


def recording_wanted() -> bool:
    """Whether the run records (or replays) here."""
    return _places.get() is not None


async def model_turn(request: ModelRequest, send: Callable[[], Awaitable[AiResponse]]) -> AiResponse:
    """``send()``, the processor's own call for ``request``, through the run's tap when there is one
    (recorded, or answered by a replay); as it is otherwise, and for a turn a wrapping processor
    passes on (it was taken once already)."""
    places = _places.get()
    if places is None or _inside_turn.get():
        return await send()
    token = _inside_turn.set(True)
    try:
        return await places.tap.model_turn(request, place=places.next(MODEL), send=send)
    finally:
        _inside_turn.reset(token)


async def record_entry(kind: str, data: Mapping[str, Any]) -> None:
    """Record ``data`` as the next entry of ``kind`` here (nothing outside a recorded run)."""
    places = _places.get()
    if places is None:
        return
    place = places.next(kind)
    entry = RecordedEntry(
        path=place.path, iteration=place.iteration, kind=kind, seq=place.seq, data=json_data(dict(data))
    )
    try:
        await maybe_await(places.tap.record(entry))
    except Exception:  # observation: never a failed step
        logger.warning("could not record %s", entry.where(), exc_info=True)


@runtime_checkable
class CallAnswerer(Protocol):
    """A tap that answers outside calls itself (a replay's): ``answer_call`` returns the outcome
    recorded at ``place`` for ``request``, and nothing is called."""

    def answer_call(self, place: RecordedEntry, request: Mapping[str, Any]) -> Any: ...


async def outside_call(kind: str, request: Mapping[str, Any], send: Callable[[], Awaitable[Any]]) -> Any:
    """``send()``, a call outside the process (an MCP tool call), through the run's tap when there
    is one: recorded as the next entry of ``kind`` here (``{"request", "outcome"}``; the outcome
    is what ``send`` returned, JSON data), or answered by a replay's tap (:class:`CallAnswerer`)
    without calling anything. As it is outside a recorded run."""
    places = _places.get()
    if places is None:
        return await send()
    place = places.next(kind)
    if isinstance(places.tap, CallAnswerer):
        return await maybe_await(places.tap.answer_call(place, json_data(dict(request))))
    outcome = await send()
    entry = RecordedEntry(
        path=place.path,
        iteration=place.iteration,
        kind=kind,
        seq=place.seq,
        data=json_data({"request": dict(request), "outcome": outcome}),
    )
    try:
        await maybe_await(places.tap.record(entry))
    except Exception:  # observation: never a failed step
        logger.warning("could not record %s", entry.where(), exc_info=True)
    return outcome

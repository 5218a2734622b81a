"""A recorded run forked at a checkpoint: replayed up to it, then on live, as a new run.

Replay answers "what did it do"; a fork answers "what if step 4 had gone differently". :func:`fork`
runs a recording's runnable in this process, with the current code, through the
:class:`ForkTap`: every model turn *before* the fork point is answered with the reply recorded
at its place (no model is called), so the run reaches the checkpoint exactly as the recorded one
did (your code and your tools run for real on the way, as in a replay); from the fork point on,
every model turn is sent to the model. The fork point is a place of the recording,
``PATH:ITERATION`` (:class:`ForkPoint`): the loop (or step) at workflow path ``PATH``, from its
iteration ``ITERATION`` on (``0`` for a step outside a loop; ``""`` is the run's root).

"Before" is in the order the run asks: the turns of the fork point's path at an earlier iteration,
and every turn of another step asked before the fork point's first entry was reached, are
replayed; once it is reached, everything the run asks is live. A turn before the fork point whose
request the recording does not hold as it is (the code before the fork point changed) is sent live
too, and listed in the report's ``divergences``: a recorded reply only ever answers the very
request it answered. A person's recorded answers are given again, in order; the recorded
step-cache hits hit.

The fork is a NEW run: with a ``store`` it is kept there under a fresh id, its record naming its
origin (:attr:`RunRecord.forked_from <agentloop.orchestration.store.RunRecord>`:
``{"run_id", "path", "iteration"}``), its usage (the live calls only), how it ended, and its own
recording (the replayed turns and the live ones), so it can be replayed, exported and forked in
turn. The :class:`ForkReport` says how it ended, how many turns were replayed and how many sent.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentloop.actions.human import Question
from agentloop.actions.model import AiResponse, ModelRequest
from agentloop.actions.recording import (
    CACHE_HIT,
    HUMAN,
    MODEL,
    RUN,
    InMemoryRecording,
    RecordedEntry,
    json_data,
    model_entry_data,
)
from agentloop.actions.usage import Usage
from agentloop.loops.contract import Runnable
from agentloop.loops.runner import InlineAgentRunner
from agentloop.loops.scope import new_run_id
from agentloop.orchestration.redaction import context_secrets, scrub
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.replay import (
    MAX_CHANGES,
    Divergence,
    FieldChange,
    ReplayCache,
    RunRecording,
    field_changes,
    model_receives,
)

if TYPE_CHECKING:  # the store's modules load on use
    from agentloop.orchestration.store import RunStore

__all__ = ["ForkPoint", "ForkReport", "ForkTap", "fork"]

#: How many of a recording's places an unknown fork point's error lists.
MAX_PLACES_SHOWN = 12


@dataclass(frozen=True, kw_only=True, slots=True)
class ForkPoint:
    """Where a fork goes on live: the step at workflow ``path``, from loop ``iteration`` on."""

    path: str
    iteration: int = 0

    @classmethod
    def parse(cls, text: str) -> ForkPoint:
        """``PATH:ITERATION`` (``pipeline/1:2``; ``:3`` for the root loop) as a fork point;
        ``ValueError`` saying how to write one otherwise."""
        path, colon, number = str(text).strip().rpartition(":")
        if not colon or not number.isdigit():
            raise ValueError(
                f"a fork point is PATH:ITERATION, a recorded step's workflow path and a loop "
                f"iteration (say 'pipeline/1:2', or ':0' for the run's root), not {text!r}"
            )
        return cls(path=path, iteration=int(number))

    def __str__(self) -> str:
        return f"{self.path}:{self.iteration}"

    def where(self) -> str:
        """The point for people: ``step 'pipeline/1', iteration 2``."""
        return f"step {self.path or '(root)'!r}, iteration {self.iteration}"

    def holds(self, path: str, iteration: int) -> bool:
        """Whether a turn at ``path``, ``iteration`` is at or after the fork point on its path."""
        return path == self.path and iteration >= self.iteration


@dataclass(frozen=True, kw_only=True, slots=True)
class ForkReport:
    """How a fork ended (module doc): the new run's id, the origin, its outcome, what it cost.

    ``status`` is the new run's (``succeeded``, ``degraded`` or ``failed``); ``replayed`` and
    ``live`` count its model turns answered from the recording and sent to the model;
    ``reached`` says whether the run got to the fork point at all (a run whose code before it
    changed may not); ``divergences`` are the turns before the fork point sent live because the
    recording did not hold their request."""

    run_id: str
    forked_from: Mapping[str, Any]
    runnable: str
    status: str
    output: Any = None
    error: Any = None
    stopped_by: str | None = None
    replayed: int = 0
    live: int = 0
    reached: bool = False
    usage: Usage = field(default_factory=Usage)
    divergences: tuple[Divergence, ...] = ()

    def describe(self) -> str:
        """The report for people."""
        origin = self.forked_from
        point = ForkPoint(path=str(origin["path"]), iteration=int(origin["iteration"]))
        lines = [
            f"run {self.run_id} ({self.runnable}): forked from run {origin['run_id']} at {point.where()}",
            f"{self.replayed} model turn(s) replayed from the recording, {self.live} sent to the model "
            f"({self.usage.total_tokens} tokens)",
        ]
        if not self.reached:
            lines.append(f"the run never reached {point.where()}: everything it asked came before it")
        for divergence in self.divergences:
            lines.append(f"sent live before the fork point: {divergence.describe()}")
        if self.status == "failed":
            lines.append(
                f"failed: {self.error.get('message') if isinstance(self.error, Mapping) else self.error}"
            )
        else:
            bound = " (a loop hit its max_iterations)" if self.stopped_by == "bound" else ""
            lines.append(f"{self.status}{bound}: {json_text(self.output)}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "forked_from": dict(self.forked_from),
            "runnable": self.runnable,
            "status": self.status,
            "output": self.output,
            "error": self.error,
            "stopped_by": self.stopped_by,
            "replayed": self.replayed,
            "live": self.live,
            "reached": self.reached,
            "usage": self.usage.to_dict(),
            "divergences": [divergence.to_dict() for divergence in self.divergences],
        }


def json_text(value: Any, limit: int = 400) -> str:
    """``value`` as one line of JSON, cut at ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


class ForkTap:
    """The recording tap of a fork (module doc): recorded replies before the fork point, the model
    from it on; every turn, replayed or live, recorded into ``recording`` (the new run's)."""

    def __init__(self, entries: Sequence[RecordedEntry], at: ForkPoint, recording: InMemoryRecording) -> None:
        self.at = at
        self.recording = recording
        self._turns = {(e.path, e.iteration, e.seq): e for e in entries if e.kind == MODEL}
        self._lock = threading.Lock()
        self.reached = False
        self.replayed = self.live = 0
        self.usage = Usage()
        self.divergences: list[Divergence] = []
        self.cache_entries = {
            str(e.data.get("key")): str(e.data.get("entry")) for e in entries if e.kind == CACHE_HIT
        }
        self._answers: dict[str, deque[Any]] = defaultdict(deque)
        for entry in entries:
            if entry.kind == HUMAN:
                self._answers[str(entry.data.get("key"))].append(entry.data.get("answer"))

    def _passes(self, place: RecordedEntry) -> bool:
        """Whether the run is at or past the fork point (it stays past once it got there)."""
        if self.at.holds(place.path, place.iteration):
            self.reached = True
        return self.reached

    async def model_turn(
        self, request: ModelRequest, *, place: RecordedEntry, send: Callable[[], Awaitable[AiResponse]]
    ) -> AiResponse:
        """The recorded reply before the fork point (for the very request it answered), the
        model's from it on; recorded either way."""
        key = (place.path, place.iteration, place.seq)
        with self._lock:
            recorded = None if self._passes(place) else self._turns.get(key)
            if not self.reached:
                replayed = model_receives(request.to_dict())
                if recorded is None:
                    self._note(place, "a model request the recording does not have", None, replayed)
                else:
                    changes = field_changes(model_receives(recorded.data.get("request")), replayed)
                    if changes:
                        self._note(place, "the request differs from the recorded one", None, None, changes)
                        recorded = None
        if recorded is None:
            response = await send()
            with self._lock:
                self.live += 1
                self.usage = self.usage + response.usage
        else:
            response = AiResponse.from_dict(recorded.data.get("response") or {})
            with self._lock:
                self.replayed += 1
        entry = RecordedEntry(
            path=place.path,
            iteration=place.iteration,
            kind=MODEL,
            seq=place.seq,
            data=model_entry_data(request, response),
        )
        await self.recording.record(entry)
        return response

    async def record(self, entry: RecordedEntry) -> None:
        """Keep ``entry`` in the new run's recording (an entry at the fork point passes it)."""
        with self._lock:
            self._passes(entry)
        await self.recording.record(entry)

    def _note(
        self,
        place: RecordedEntry,
        reason: str,
        recorded: Any,
        replayed: Any,
        changes: list[FieldChange] | None = None,
    ) -> None:
        if changes is None:
            changes = [FieldChange(field="request", recorded=recorded, replayed=replayed)]
        self.divergences.append(
            Divergence(
                path=place.path,
                iteration=place.iteration,
                seq=place.seq,
                reason=reason,
                changes=tuple(changes[:MAX_CHANGES]),
            )
        )

    def answer(self, question: Question) -> Any:
        """The recorded answer to ``question`` (by its key, in the order they were given)."""
        answers = self._answers.get(question.key)
        if not answers:
            raise LookupError(
                f"the recording has no answer to the question {question.key!r} ({question.prompt!r}): "
                "a fork asks no person"
            )
        return answers.popleft()


def fork_places(recording: RunRecording) -> list[ForkPoint]:
    """The places a recording can be forked at: each recorded step's path and iteration."""
    places = sorted({(entry.path, entry.iteration) for entry in recording.entries})
    return [ForkPoint(path=path, iteration=iteration) for path, iteration in places]


def check_fork_point(recording: RunRecording, at: ForkPoint | str) -> ForkPoint:
    """``at`` as a :class:`ForkPoint` of ``recording``; ``ValueError`` naming the places it has
    when it is none of them."""
    point = ForkPoint.parse(at) if isinstance(at, str) else at
    places = fork_places(recording)
    if point not in places:
        shown = ", ".join(repr(str(place)) for place in places[:MAX_PLACES_SHOWN])
        more = f" and {len(places) - MAX_PLACES_SHOWN} more" if len(places) > MAX_PLACES_SHOWN else ""
        raise ValueError(
            f"run {recording.run_id} recorded nothing at {point.where()}; "
            f"fork it at one of its places (PATH:ITERATION): {shown or 'none'}{more}"
        )
    return point


async def fork(
    recording: RunRecording,
    *,
    at: ForkPoint | str,
    runnable: type[Runnable] | None = None,
    context: Any = None,
    registry: RunnableRegistry | None = None,
    store: RunStore | None = None,
    run_id: str | None = None,
) -> ForkReport:
    """Fork ``recording`` at ``at`` (``PATH:ITERATION`` or a :class:`ForkPoint`): replay it up to
    there with no model call, then go on live with the current code, as a new run (module doc).

    The runnable is ``runnable`` (with ``context``), else the one ``registry`` holds under the
    recording's name, with the context its factory builds from the recorded spec: its processor
    is the one the live turns go to. With ``store`` the new run (id ``run_id``, else a fresh one)
    is kept there with its origin, usage, outcome and recording. ``ValueError`` for a fork point
    the recording has no entry at; ``LookupError`` for a name the registry does not hold. A run
    that fails is a finding (``status`` ``"failed"``), never a raise.
    """
    point = check_fork_point(recording, at)
    if runnable is None:
        if registry is None:
            raise ValueError("a fork needs the runnable, or a registry that holds it")
        registration = registry.get(recording.runnable)
        runnable = registration.runnable
        if context is None:
            context = registration.build_context(recording.context)
    new_id = run_id or new_run_id()
    origin = {"run_id": recording.run_id, "path": point.path, "iteration": point.iteration}
    entries = InMemoryRecording()
    tap = ForkTap(recording.entries, point, entries)
    runner = InlineAgentRunner.create(
        runnable=runnable, context=context, cache=ReplayCache(tap.cache_entries)
    )
    if store is not None:
        store.create_run(
            run_id=new_id, runnable=recording.runnable, input=recording.input, forked_from=origin
        )
        store.mark_running(new_id)
    status, output, error, stopped_by = "failed", None, None, None
    try:
        outcome = await runner.request_outcome(
            input=recording.input, run_id=new_id, recording=tap, on_question=tap.answer
        )
    except Exception as failure:  # the forked run failed: a finding, never a crash
        message = scrub(f"{failure}", context_secrets(recording.context))
        error = {"type": type(failure).__name__, "message": message}
    except BaseException:  # interrupted (Ctrl-C): the new run ends cancelled, not running forever
        if store is not None:
            _finish(store, new_id, tap, entries, recording, status="cancelled")
        raise
    else:
        status, output, error, stopped_by = (
            outcome.status,
            json_data(outcome.result),
            outcome.error,
            outcome.stopped_by,
        )
    if store is not None:
        _finish(store, new_id, tap, entries, recording, status, output, error, stopped_by)
    return ForkReport(
        run_id=new_id,
        forked_from=origin,
        runnable=recording.runnable,
        status=status,
        output=output,
        error=error,
        stopped_by=stopped_by,
        replayed=tap.replayed,
        live=tap.live,
        reached=tap.reached,
        usage=tap.usage,
        divergences=tuple(tap.divergences),
    )


def _finish(
    store: RunStore,
    run_id: str,
    tap: ForkTap,
    entries: InMemoryRecording,
    recording: RunRecording,
    status: str,
    output: Any = None,
    error: Any = None,
    stopped_by: str | None = None,
) -> None:
    """The new run's usage (the live calls'), its end and its recording, into ``store``."""
    from agentloop.orchestration.store.recordings import recording_store_for

    if tap.usage.total_tokens:
        store.add_usage(run_id, tap.usage.input_tokens, tap.usage.output_tokens)
    store.finish_run(run_id, status=status, output=output, error=error, stopped_by=stopped_by)
    recordings = recording_store_for(store)
    if recordings is not None:
        meta = RecordedEntry(path="", iteration=0, kind=RUN, seq=0, data={"context": dict(recording.context)})
        recordings.add(run_id, [meta, *entries.entries])

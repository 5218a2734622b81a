"""What both fronts (plain HTTP and GraphQL) do with runs, checked once.

:class:`RunService` starts runs through the Celery app
(:class:`~agentloop.orchestration.client.CeleryAgentRunner`, i.e. ``agentloop.launch``),
only of runnables the app's registry holds; reads runs and their progress from
the run store (progress through the one :class:`~agentloop.orchestration.web.progress.ProgressHub`);
and cancels through the run handle. Every method takes the caller's
:class:`~agentloop.orchestration.web.auth.Principal`, checks its scope and answers the
views of ``views.py`` (contents only for ``read``). Store calls run in a thread.

Ownership, checked here once for both fronts: a run started here records the
caller's principal (the ``principal`` of ``agentloop.launch``). A caller
reaches a run only when :meth:`~agentloop.orchestration.web.auth.Principal.may_act_on`
says so (its principal's run, or an ``admin`` token); any other run answers the
404 of a run that does not exist, with the same words, so a refusal does not
tell that the id is taken. Listing shows only the caller's runs unless admin.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Mapping
from functools import partial
from typing import Any

from celery import Celery
from starlette.exceptions import HTTPException

from agentloop.orchestration.client import CeleryAgentRunner, RunHandle
from agentloop.orchestration.errors import LaunchRequestError
from agentloop.orchestration.graph import graph_of, to_mermaid
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.launches import launch_digest
from agentloop.orchestration.store import RunRecord, RunStore
from agentloop.orchestration.web.auth import CANCEL, START, Principal
from agentloop.orchestration.web.progress import EventItem, ProgressHub, RunEnded
from agentloop.orchestration.web.refusals import conflict, invalid_input, not_found
from agentloop.orchestration.web.request_limits import (
    HeldStream,
    StreamSlots,
    check_identifier,
    check_json,
    check_page,
    check_token_budget,
)
from agentloop.orchestration.web.views import event_view, pending_view, run_view
from agentloop.orchestration.wire import LaunchRequest

__all__ = ["LAUNCH_FIELDS", "RunService"]

#: The fields of a start request (the keyword arguments of ``agentloop.launch``).
LAUNCH_FIELDS = frozenset({"runnable", "input", "context", "run_id", "token_budget", "record"})
#: Runs launched here and not yet recorded by a worker, remembered so they read as pending.
_LAUNCHED_KEPT = 10_000


def _no_run(run_id: Any) -> HTTPException:
    """The 404 of a run the caller cannot reach: the same whether it does not exist or is another's."""
    return not_found(f"no run {run_id!r} (a run just started elsewhere is recorded once a worker takes it)")


class RunService:
    """Start, read, follow and cancel runs; list the runnables and draw their graphs."""

    def __init__(
        self,
        *,
        celery_app: Celery,
        store: RunStore,
        registry: RunnableRegistry,
        hub: ProgressHub,
        slots: StreamSlots,
    ) -> None:
        self.celery_app, self.store, self.registry = celery_app, store, registry
        self.hub, self.slots = hub, slots
        #: run id -> (runnable, principal, launch digest) of the runs launched here
        self._launched: OrderedDict[str, tuple[str, str, str]] = OrderedDict()

    # ----- starting --------------------------------------------------------------------------

    async def start(self, principal: Principal, request: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Launch a run; ``(view, True)``, or ``(view, False)`` when ``run_id`` names this workflow's
        run already (a retried request attaches to it, never launches it twice)."""
        principal.require(START)
        unknown = sorted(set(request) - LAUNCH_FIELDS)
        if unknown:
            raise invalid_input(f"unknown field(s) {', '.join(unknown)}; a run takes {sorted(LAUNCH_FIELDS)}")
        name = check_identifier(request.get("runnable"), what="runnable")
        if name not in self.registry:
            raise invalid_input(f"unknown runnable {name!r}; see GET /runnables")
        context = request.get("context")
        if context is not None and not isinstance(context, dict):
            raise invalid_input("context must be a JSON object")
        run_id = request.get("run_id")
        context = check_json(context or {}, what="context")
        input = check_json(request.get("input"), what="input")
        budget = check_token_budget(request.get("token_budget"))
        record = request.get("record")
        if record is not None and not isinstance(record, bool):
            raise invalid_input(f"record must be true or false, not {record!r}")

        def digest(run_id: str, starter: str | None) -> str:  # what a worker compares (launches.py)
            launch = LaunchRequest(
                runnable=name,
                input=input,
                context=context,
                run_id=run_id,
                token_budget=budget,
                principal=starter,
                record=bool(record),
            )
            return launch_digest(launch.to_kwargs())

        if run_id is not None:
            run_id = check_identifier(run_id, what="run_id")
            existing = await self._attach(principal, run_id, name, partial(digest, run_id))
            if existing is not None:
                return existing, False
        runner = CeleryAgentRunner.create(
            runnable=name, context=context, app=self.celery_app, store=self.store
        )
        try:
            handle = await runner.request(
                input=input, run_id=run_id, token_budget=budget, principal=principal.name, record=bool(record)
            )
        except LaunchRequestError as error:
            raise invalid_input(str(error)) from None
        self._remember(handle.run_id, name, principal.name, digest(handle.run_id, principal.name))
        view = pending_view(handle.run_id, name, principal.name, input=input, can_read=principal.can_read)
        return view, True

    async def _attach(
        self, principal: Principal, run_id: str, name: str, digest: Callable[[str | None], str]
    ) -> dict[str, Any] | None:
        """The run ``run_id`` when this start asks for the launch that made it (a retried request;
        ``digest(starter)`` is this start's digest as that run's starter's); ``None`` when there is
        none; 409 when it is another workflow's, or was started with other arguments."""
        record = await asyncio.to_thread(self.store.get_run, run_id)
        known: tuple[str, str | None, str | None] | None
        if record is None:
            known = self._launched.get(run_id)
        else:
            run_owner = await asyncio.to_thread(self.store.run_owner, run_id)
            made_by = run_owner.launch_digest if run_owner is not None else None
            known = (record.runnable, record.principal, made_by)
        if known is None:
            return None
        runnable, owner, made_by = known
        if not principal.may_act_on(owner):  # taken, but whose and by what is not this caller's business
            raise conflict(f"run id {run_id!r} is taken; start the run with another id")
        if runnable != name:
            raise conflict(f"run id {run_id!r} belongs to a run of {runnable!r}")
        if made_by is not None and made_by != digest(owner):
            raise conflict(f"run id {run_id!r} belongs to a run of {runnable!r} started with other arguments")
        if record is None:
            return pending_view(run_id, name, owner)
        return run_view(record, can_read=principal.can_read)

    def _remember(self, run_id: str, name: str, principal: str, digest: str) -> None:
        self._launched[run_id] = (name, principal, digest)
        while len(self._launched) > _LAUNCHED_KEPT:
            self._launched.popitem(last=False)

    # ----- reading ---------------------------------------------------------------------------

    async def _record(self, principal: Principal, run_id: Any) -> RunRecord | None:
        """The run's record when the caller may reach it; 404 when it is another principal's."""
        record = await asyncio.to_thread(self.store.get_run, check_identifier(run_id, what="run id"))
        if record is not None and not principal.may_act_on(record.principal):
            raise _no_run(run_id)
        return record

    async def get(self, principal: Principal, run_id: Any) -> dict[str, Any]:
        """The run (pending when launched here and not recorded yet); 404 when there is none, or
        it is not the caller's to reach."""
        record = await self._record(principal, run_id)
        if record is not None:
            return run_view(record, can_read=principal.can_read)
        launched = self._launched.get(run_id)
        if launched is not None and principal.may_act_on(launched[1]):
            return pending_view(run_id, launched[0], launched[1])
        raise _no_run(run_id)

    async def check_reach(self, principal: Principal, run_id: Any) -> None:
        """404 unless the caller may act on the run (see :meth:`get`)."""
        await self.get(principal, run_id)

    async def list_runs(
        self,
        principal: Principal,
        *,
        status: str | None = None,
        runnable: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """The latest runs first, filtered by ``status`` and ``runnable``; one page of them."""
        limit, offset = check_page(limit, offset)
        if status is not None:
            check_identifier(status, what="status")
        if runnable is not None:
            check_identifier(runnable, what="runnable")
        records = await asyncio.to_thread(
            self.store.list_runs,
            limit=limit,
            offset=offset,
            status=status,
            runnable=runnable,
            principal=None if principal.is_admin else principal.name,
        )
        return [run_view(record, can_read=principal.can_read) for record in records]

    async def cancel(self, principal: Principal, run_id: Any) -> dict[str, Any]:
        """Ask the run to stop at its next step; 409 when it has ended."""
        principal.require(CANCEL)
        record = await self._record(principal, run_id)
        if record is None:
            raise _no_run(run_id)
        if record.is_finished:
            raise conflict(f"run {record.id!r} has already ended ({record.status})")
        handle = RunHandle(app=self.celery_app, run_id=record.id, store=self.store)
        await asyncio.to_thread(handle.cancel)
        return await self.get(principal, record.id)

    # ----- following -------------------------------------------------------------------------

    async def stream(
        self, principal: Principal, run_id: Any, *, after_id: int = 0, idle_seconds: float | None = None
    ) -> HeldStream[tuple[str, dict[str, Any]]]:
        """Checks that the run exists and takes a stream slot (503 when none is free), then returns
        its stream, which gives the slot back once closed (``aclose``) or over:
        ``("progress", event view)`` items with their store ids, then ``("end", run view)``;
        ``("idle", {})`` after ``idle_seconds`` without news."""
        await self.get(principal, run_id)  # NotFound before the stream starts
        # the slot is taken now, not once the response has started: a 503 is still an answer
        return self.slots.hold(self._stream(principal, str(run_id), after_id, idle_seconds))

    async def _stream(
        self, principal: Principal, run_id: str, after_id: int, idle_seconds: float | None
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        follow = self.hub.follow(run_id, after_id=after_id, idle_seconds=idle_seconds)
        try:
            async for item in follow:
                if isinstance(item, EventItem):
                    yield "progress", event_view(item.id, item.event, can_read=principal.can_read)
                elif isinstance(item, RunEnded):
                    yield "end", run_view(item.record, can_read=principal.can_read)
                else:
                    yield "idle", {}
        finally:
            await follow.aclose()

    async def ended_without_news(self, principal: Principal, run_id: Any, after_id: int) -> bool:
        """Whether the run has ended and has no event after ``after_id`` (a resumed stream is done);
        404 when the run is not the caller's to reach."""
        record = await self._record(principal, run_id)
        if record is None or not record.is_finished:
            return False
        rows = await asyncio.to_thread(self.store.events, record.id, after_id=after_id, limit=1)
        return not rows

    # ----- the runnables ---------------------------------------------------------------------

    def runnables(self, principal: Principal) -> list[dict[str, Any]]:
        """Every runnable a run may name, with its kind; declared names first."""
        nodes = [graph_of(self.registry, name) for name in self.registry.names]
        nodes.sort(key=lambda node: (node.derived, node.name))
        return [
            {"name": node.name, "label": node.label, "kind": node.kind, "declared": not node.derived}
            for node in nodes
        ]

    def graph(self, principal: Principal, name: Any) -> dict[str, Any]:
        """The runnable's tree (``graph``) and its mermaid text (``mermaid``)."""
        if not isinstance(name, str) or name not in self.registry:
            raise not_found(f"no runnable {name!r}")
        node = graph_of(self.registry, name)
        return {"name": name, "graph": node.to_dict(), "mermaid": to_mermaid(node)}

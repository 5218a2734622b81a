"""The GraphQL schema (Strawberry): start, read, list, cancel and follow runs.

::

    type Query {
      run(id: String!): Run                       # null when there is no such run
      runs(filter: RunFilter, page: Page): [Run!]!
      runnables: [Runnable!]!
      runnable(name: String!): Runnable
    }
    type Mutation {
      startRun(runnable: String!, input: JSON, context: JSON, runId: String, tokenBudget: Long): Run!
      cancelRun(id: String!): Run!
      resumeRun(id: String!, answer: JSON, path: String, key: String): JSON!   # a paused run's answer
    }
    type Subscription {
      runProgress(id: String!, afterId: Long! = 0): ProgressItem!   # RunEvent ... then RunEnd
    }

Every resolver goes through the :class:`~agentloop.orchestration.web.service.RunService`
in the context, with the caller's :class:`~agentloop.orchestration.web.auth.Principal`;
a refusal is a GraphQL error whose ``extensions.code`` says why
(``UNAUTHENTICATED``, ``FORBIDDEN``, ``NOT_FOUND``, ``CONFLICT``,
``BAD_USER_INPUT``, ``UNAVAILABLE``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Annotated, Any, NewType, TypeVar

import strawberry
from graphql import GraphQLError
from starlette.exceptions import HTTPException
from strawberry.scalars import JSON
from strawberry.schema.config import StrawberryConfig
from strawberry.types import Info
from strawberry.types.scalar import ScalarDefinition

from agentloop.orchestration.web.auth import Principal
from agentloop.orchestration.web.refusals import code_of, unauthenticated
from agentloop.orchestration.web.request_limits import graphql_limits
from agentloop.orchestration.web.resume import resume_through_workers
from agentloop.orchestration.web.service import RunService

__all__ = ["build_schema"]

T = TypeVar("T")

#: An integer of up to 64 bits (token counts and budgets, event ids): GraphQL's ``Int`` has 32.
Long = NewType("Long", int)
_SCALARS: dict[object, ScalarDefinition] = {
    Long: strawberry.scalar(
        name="Long",
        serialize=int,
        parse_value=int,
        description="An integer of up to 64 bits (token counts and budgets, event ids).",
    )
}


@strawberry.type
class Usage:
    input_tokens: Long
    output_tokens: Long
    total_tokens: Long
    #: Step-cache use: hits, misses, and the tokens the hits saved.
    cache_hits: Long
    cache_misses: Long
    tokens_saved: Long
    #: MCP tool calls the run made.
    tool_calls: Long


@strawberry.type
class Run:
    """A run; ``input``, ``result`` and ``error`` messages are size hints without the read scope."""

    id: str
    runnable: str
    status: str
    finished: bool
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    usage: Usage
    token_budget: Long | None
    cancel_requested: bool
    #: Who started it over HTTP (its token's principal); null when it was started another way.
    principal: str | None
    input: JSON | None
    result: JSON | None
    error: JSON | None
    #: How a run that returned ended: "complete", or "bound" when a loop of it hit its
    #: max_iterations first; null for a run that did not return (yet).
    stopped_by: str | None
    #: The recorded run and the point this run was forked at (``agentloop replay --fork-at``):
    #: {"run_id", "path", "iteration"}; null for a run that is not a fork.
    forked_from: JSON | None

    @classmethod
    def of(cls, view: dict[str, Any]) -> Run:
        return cls(**{**view, "usage": Usage(**view["usage"])})


@strawberry.type
class RunEvent:
    """One progress event; ``id`` is its id in the run store (resume with ``afterId``)."""

    id: Long
    run_id: str | None
    path: str
    runnable: str
    iteration: int
    max_iterations: int
    phase: str
    status: str
    message: str
    data: JSON
    at: float | None


@strawberry.type
class RunEnd:
    """The last item of a progress stream: the run has ended."""

    status: str
    run: Run


ProgressItem = Annotated[RunEvent | RunEnd, strawberry.union("ProgressItem")]


@strawberry.type
class Runnable:
    """A registered runnable a run may name."""

    name: str
    label: str
    kind: str
    declared: bool

    @strawberry.field(description="Its tree: stages, branches, nesting, actions.")
    async def graph(self, info: Info) -> JSON:
        return await _call(
            info, lambda service, principal: _ready(service.graph(principal, self.name)["graph"])
        )

    @strawberry.field(description="The same tree as a mermaid flowchart.")
    async def mermaid(self, info: Info) -> str:
        graph = await _call(info, lambda service, principal: _ready(service.graph(principal, self.name)))
        return str(graph["mermaid"])


@strawberry.input
class RunFilter:
    status: str | None = None
    runnable: str | None = None


@strawberry.input
class Page:
    limit: int = 50
    offset: int = 0


async def _ready(value: T) -> T:
    return value


def _principal(info: Info) -> Principal:
    principal = info.context.get("principal")
    if not isinstance(principal, Principal):
        raise unauthenticated("a bearer token is required")
    return principal


async def _call(info: Info, action: Callable[[RunService, Principal], Awaitable[T]]) -> T:
    """Run ``action`` with the service and the caller; a refusal becomes a GraphQL error."""
    try:
        return await action(info.context["service"], _principal(info))
    except HTTPException as error:
        raise GraphQLError(str(error.detail), extensions={"code": code_of(error)}) from None


@strawberry.type
class Query:
    @strawberry.field(description="A run by id; null when there is none.")
    async def run(self, info: Info, id: str) -> Run | None:
        async def get(service: RunService, principal: Principal) -> Run | None:
            try:
                return Run.of(await service.get(principal, id))
            except HTTPException as error:
                if error.status_code == 404:
                    return None
                raise

        return await _call(info, get)

    @strawberry.field(description="The latest runs first.")
    async def runs(self, info: Info, filter: RunFilter | None = None, page: Page | None = None) -> list[Run]:
        filter, page = filter or RunFilter(), page or Page()

        async def listed(service: RunService, principal: Principal) -> list[Run]:
            views = await service.list_runs(
                principal,
                status=filter.status,
                runnable=filter.runnable,
                limit=page.limit,
                offset=page.offset,
            )
            return [Run.of(view) for view in views]

        return await _call(info, listed)

    @strawberry.field(description="Every runnable a run may name.")
    async def runnables(self, info: Info) -> list[Runnable]:
        views = await _call(info, lambda service, principal: _ready(service.runnables(principal)))
        return [Runnable(**view) for view in views]

    @strawberry.field(description="One runnable; null when none is registered under the name.")
    async def runnable(self, info: Info, name: str) -> Runnable | None:
        views = await _call(info, lambda service, principal: _ready(service.runnables(principal)))
        return next((Runnable(**view) for view in views if view["name"] == name), None)


@strawberry.type
class Mutation:
    @strawberry.mutation(description="Launch a registered runnable (agentloop.launch); the run is pending.")
    async def start_run(
        self,
        info: Info,
        runnable: str,
        input: JSON | None = None,
        context: JSON | None = None,
        run_id: str | None = None,
        token_budget: Long | None = None,
        record: bool | None = None,
    ) -> Run:
        request: dict[str, Any] = {"runnable": runnable, "input": input, "context": context}
        request.update(run_id=run_id, token_budget=token_budget, record=record)
        view, _ = await _call(info, lambda service, principal: service.start(principal, request))
        return Run.of(view)

    @strawberry.mutation(description="Ask the run to stop at its next step.")
    async def cancel_run(self, info: Info, id: str) -> Run:
        return Run.of(await _call(info, lambda service, principal: service.cancel(principal, id)))

    @strawberry.mutation(description="Answer the question a paused run waits for (agentloop.resume).")
    async def resume_run(
        self, info: Info, id: str, answer: JSON | None = None, path: str | None = None, key: str | None = None
    ) -> JSON:
        def resume(service: RunService, principal: Principal) -> Awaitable[Any]:
            return resume_through_workers(service, principal, id, answer, path=path, key=key)

        return await _call(info, resume)


@strawberry.type
class Subscription:
    @strawberry.subscription(description="The run's events as they are written, then its end.")
    async def run_progress(
        self,
        info: Info,
        id: str,
        after_id: Long = Long(0),
    ) -> AsyncGenerator[ProgressItem, None]:
        stream = await _call(
            info, lambda service, principal: service.stream(principal, id, after_id=after_id)
        )
        async with aclosing(stream) as items:
            async for kind, view in items:
                if kind == "progress":
                    yield RunEvent(**view)
                elif kind == "end":
                    yield RunEnd(status=view["status"], run=Run.of(view))
                    return


def build_schema() -> strawberry.Schema:
    """The schema, with Strawberry's limits on query depth, aliases and tokens."""
    return strawberry.Schema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=graphql_limits(),
        config=StrawberryConfig(scalar_map=_SCALARS),
    )

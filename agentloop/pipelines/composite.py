"""``BaseCompositeAgent``: fan out into branches decided at run time, then merge.

``build_branches`` decides the width from the input; branches run concurrently
(asyncio) under ``max_concurrency``; ``merge_results`` fans in. Under
``FailurePolicy.FAIL_FAST`` the first failing branch cancels the rest and the
composite raises :class:`~actions.BranchFailedError`; under
``FailurePolicy.COLLECT`` every branch runs to its end and the merge receives
each result with failures marked, so one failure never loses the others.
Cancellation and the deadline are never collected: they stop the whole run.
Branch ``key`` runs at path ``<path>/branch/<key>``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.errors import BranchFailedError, RunStoppedError
from agentloop.loops.contract import ProgressCallback, Runnable, RunnableBase
from agentloop.loops.progress import ProgressStatus
from agentloop.loops.scope import RunScope, ensure_scope, failure_phase, use_scope


class FailurePolicy(StrEnum):
    """What a failed branch does to its composite: end it at once, or be collected with the others."""

    FAIL_FAST = "fail_fast"
    COLLECT = "collect"


@dataclass(frozen=True, kw_only=True, slots=True)
class Branch:
    """One branch: which runnable, on which input, under which key."""

    runnable: type[Runnable]
    input: Any
    key: str


@dataclass(frozen=True, kw_only=True, slots=True)
class BranchResult:
    """How one branch ended. ``error`` is ``{"type", "message"}`` when it failed."""

    key: str
    ok: bool
    output: Any = None
    error: Mapping[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "ok": self.ok,
            "output": self.output,
            "error": dict(self.error) if self.error is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BranchResult:
        error = data.get("error")
        return cls(
            key=str(data["key"]),
            ok=bool(data["ok"]),
            output=data.get("output"),
            error=dict(error) if error is not None else None,
        )

    @classmethod
    def failure(cls, key: str, error: BaseException) -> BranchResult:
        return cls(key=key, ok=False, error={"type": type(error).__name__, "message": str(error)})


#: What a branch key may not hold: it is one step of the branch's path (``<path>/branch/<key>``).
_PATH_SEPARATORS = ("/", "\\")


def _check_key(key: object) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"a branch key must be a non-empty string, not {key!r}")
    if any(separator in key for separator in _PATH_SEPARATORS):
        raise ValueError(
            f"branch key {key!r} holds a path separator ('/' or '\\'): "
            "a key is one step of the branch's path; use another character"
        )


def check_pack_size(size: Any) -> None:
    """:class:`ValueError` unless ``size`` (a composite's or a pipeline's ``pack_size``) is ``None``
    or a whole number of at least 1."""
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(f"pack_size must be a whole number of at least 1 (or None), not {size!r}")


class BaseCompositeAgent(RunnableBase):
    """Implement ``build_branches``; override ``merge_results`` to shape the fan-in."""

    #: At most this many branches run at once (``None``: no bound), in-process and on Celery.
    max_concurrency: int | None = 8
    failure_policy: FailurePolicy = FailurePolicy.FAIL_FAST
    #: On Celery, how many branches one task runs together on one event loop (``None``: the
    #: deployment's ``AGENTLOOP_PACK_SIZE``, which is 1, one task per branch, unless set).
    #: In-process it changes nothing. Each packed branch keeps its own checkpoints, result,
    #: progress and failure; see the how-to on packing for what a pack costs.
    pack_size: int | None = None
    #: The runnable classes branches may use. In-process this is documentation;
    #: on Celery, registering the composite registers these too.
    branch_runnables: Sequence[type[Runnable]] = ()

    def build_branches(self, *, input: Any) -> Sequence[Branch]:
        raise NotImplementedError(f"{type(self).__name__} must implement build_branches")

    def merge_results(self, *, results: Sequence[BranchResult], input: Any) -> Any:
        """Default fan-in: each branch's outcome as a JSON object, in branch order."""
        return [result.to_dict() for result in results]

    def branch_scope(self, *, scope: RunScope, key: str) -> RunScope:
        return scope.child(f"branch/{key}")

    async def resolve_branches(self, *, input: Any) -> list[Branch]:
        """``build_branches`` checked: branches are :class:`Branch` values with unique keys, each a
        non-empty string without a path separator (a key is one step of the branch's path), and
        ``max_concurrency`` and ``pack_size``, when set, are at least 1."""
        if self.max_concurrency is not None and self.max_concurrency < 1:
            bound = self.max_concurrency
            raise ValueError(f"max_concurrency must be at least 1 (or None for no bound), not {bound}")
        check_pack_size(self.pack_size)
        branches = list(await maybe_await(self.build_branches(input=input)))
        seen: set[str] = set()
        for branch in branches:
            if not isinstance(branch, Branch):
                raise TypeError(f"build_branches must return Branch values, got {branch!r}")
            _check_key(branch.key)
            if branch.key in seen:
                raise ValueError(f"duplicate branch key {branch.key!r}")
            seen.add(branch.key)
        return branches

    async def emit_composite_event(
        self,
        *,
        scope: RunScope,
        on_progress: ProgressCallback | None,
        phase: str,
        status: ProgressStatus,
        width: int,
        done: int,
        message: str = "",
    ) -> None:
        """One progress event of the composite itself (shared by every runner)."""
        event = self.make_event(
            scope=scope,
            iteration=done,
            max_iterations=width,
            phase=phase,
            status=status,
            message=message or f"{done} of {width} branches",
            data={"width": width},
        )
        await self.emit_progress(event=event, on_progress=on_progress)

    async def emit_composite_failure(
        self, *, scope: RunScope, on_progress: ProgressCallback | None, width: int, error: BaseException
    ) -> None:
        """The composite's ``failed`` event for ``error`` (shared by every runner)."""
        await self.emit_composite_event(
            scope=scope,
            on_progress=on_progress,
            phase=failure_phase(error, scope),
            status=ProgressStatus.FAILED,
            width=width,
            done=0,
            message=f"{type(error).__name__}: {error}",
        )

    async def run(self, *, input: Any, on_progress: ProgressCallback | None = None) -> Any:
        with ensure_scope() as scope:
            scope.check()
            branches = await self.resolve_branches(input=input)
            width = len(branches)

            async def emit(phase: str, status: ProgressStatus, done: int, message: str = "") -> None:
                await self.emit_composite_event(
                    scope=scope,
                    on_progress=on_progress,
                    phase=phase,
                    status=status,
                    width=width,
                    done=done,
                    message=message,
                )

            await emit("start", ProgressStatus.STARTED, 0)
            try:
                results = await self._run_branches(scope=scope, branches=branches, on_progress=on_progress)
                await emit("merge", ProgressStatus.PROGRESS, width)
                merged = await maybe_await(self.merge_results(results=results, input=input))
            except BaseException as error:
                await self.emit_composite_failure(
                    scope=scope, on_progress=on_progress, width=width, error=error
                )
                raise
            await emit("done", ProgressStatus.COMPLETED, width)
            return merged

    async def _run_branches(
        self, *, scope: RunScope, branches: list[Branch], on_progress: ProgressCallback | None
    ) -> list[BranchResult]:
        limit = asyncio.Semaphore(self.max_concurrency) if self.max_concurrency else None
        collect = self.failure_policy == FailurePolicy.COLLECT

        async def one(branch: Branch) -> BranchResult:
            if limit is not None:
                await limit.acquire()
            try:
                scope.check()
                with use_scope(self.branch_scope(scope=scope, key=branch.key)):
                    output = await branch.runnable.create(context=self.context).run(
                        input=branch.input, on_progress=on_progress
                    )
                return BranchResult(key=branch.key, ok=True, output=output)
            except RunStoppedError:
                raise
            except Exception as error:
                if collect:
                    return BranchResult.failure(branch.key, error)
                raise BranchFailedError(branch.key, error) from error
            finally:
                if limit is not None:
                    limit.release()

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(branch)) for branch in branches]
        except BaseExceptionGroup as group_error:
            # Surface the first meaningful error rather than the group wrapper.
            first = _first_error(group_error)
            raise first from None
        return [task.result() for task in tasks]


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            return _first_error(error)
        return error
    return group

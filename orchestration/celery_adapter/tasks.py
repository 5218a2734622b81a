"""The Celery tasks. Each is thin: decode the message, call the executor, encode
the answer, and either return a value or replace itself with the canvas the
workflow expands into (a pipeline -> a ``chain``, a composite -> a ``chord``,
expanded at run time so a width can depend on the previous stage's output).

Task names are the public wire contract. Other services, importing only Celery::

    result = send_task("agentloop.launch", kwargs={"runnable": NAME, "input": JSON,
                       "context": JSON (optional), "run_id": str (optional),
                       "token_budget": int (optional)})
    send_task("agentloop.progress", kwargs={"run_id": result.id, "after_id": 0}).get()
    send_task("agentloop.cancel", kwargs={"run_id": result.id})
    result.get()   # the workflow's result
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from celery import Celery, Signature, Task, chain, chord

from orchestration.celery_adapter.batches import install_batch_tasks
from orchestration.engine import NodeExecutor, Step
from orchestration.registry import ContextSpecError, registry
from orchestration.store.seams import get_run_store
from orchestration.wire import Node

T = TypeVar("T")

LAUNCH = "agentloop.launch"
RUN = "agentloop.run"
STAGE = "agentloop.stage"
PIPELINE_DONE = "agentloop.pipeline_done"
MERGE = "agentloop.merge"
FINALIZE = "agentloop.finalize"
PROGRESS = "agentloop.progress"
CANCEL = "agentloop.cancel"
#: Seconds between checkpoints of a fast loop (every LLM-paced iteration is checkpointed);
#: ``AGENTLOOP_CHECKPOINT_SECONDS=0`` checkpoints after every iteration.
CHECKPOINT_SECONDS = float(os.environ.get("AGENTLOOP_CHECKPOINT_SECONDS", "0.5") or 0.5)
TASK_NAMES = (LAUNCH, RUN, STAGE, PIPELINE_DONE, MERGE, FINALIZE, PROGRESS, CANCEL)


_loops = threading.local()


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run the core's coroutine on this thread's event loop (one per worker thread, reused)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = _loops.loop = asyncio.new_event_loop()
    return loop.run_until_complete(coroutine)


def _executor(task: Task) -> NodeExecutor:
    def publish(event: dict[str, Any]) -> None:
        if task.request.id and not task.request.called_directly:
            task.update_state(state="PROGRESS", meta=event)
            task.send_event("task-progress", progress=event)

    return NodeExecutor(
        registry=registry, store=get_run_store(), update_state=publish, checkpoint_interval=CHECKPOINT_SECONDS
    )


def install_tasks(app: Celery) -> None:
    """Register the framework's tasks on ``app`` (and only on it)."""
    # -- privacy: agentloop.* arguments and results hidden from Flower and worker logs
    from orchestration.celery_adapter.privacy import install_privacy

    install_privacy(app)
    # -- end privacy

    def expand(task: Task, answer: Step | dict[str, Any], then: Signature | None = None) -> Any:
        """Return the value, or replace ``task`` with the canvas the node expands into."""
        if isinstance(answer, dict):  # a failure marker travelling to its collecting composite
            return answer
        if answer.is_value:
            return answer.value
        assert answer.node is not None
        node = answer.node.to_dict()
        tail = [then] if then is not None else []
        if answer.stages:
            # The pipeline's own input rides along with each stage only when it reads it.
            carried = answer.input if answer.pipeline_reads_input else None
            steps = [stage.si(answer.input, node, 0, carried)]
            steps += [stage.s(node, index, carried) for index in range(1, answer.stages)]
            raise task.replace(chain(*steps, pipeline_done.s(node), *tail))
        header = [run.si(child.to_dict(), child_input) for child, child_input in answer.branches]
        if len(header) == 1:  # a one-member group in a chain is unsafe in Celery: chain it instead
            raise task.replace(chain(header[0], merge.s(node, answer.input, True), *tail))
        raise task.replace(chain(chord(header, merge.s(node, answer.input)), *tail))

    def record_success(result: Any, run_id: str) -> Any:
        get_run_store().finish_run(run_id, status="succeeded", output=result)
        return result

    @app.task(name=LAUNCH, bind=True, shared=False)
    def launch(
        self: Task,
        runnable: str,
        input: Any = None,
        context: Any = None,
        run_id: str | None = None,
        token_budget: int | None = None,
    ) -> Any:
        """Start the registered workflow ``runnable``; its final result becomes this task's.

        ``token_budget`` (optional) caps the tokens all steps of the run may use together.
        """
        run_id = str(run_id or self.request.id)
        store = get_run_store()
        bad_budget = token_budget is not None and (
            isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 0
        )
        store.create_run(
            run_id=run_id,
            runnable=str(runnable),
            input=input,
            celery_task_id=self.request.id,
            token_budget=None if bad_budget else token_budget,
        )
        try:
            if bad_budget:
                raise ContextSpecError(f"token_budget must be a non-negative integer, got {token_budget!r}")
            registry.get(runnable)
            if context is not None and not isinstance(context, dict):
                raise ContextSpecError(
                    f"the context spec must be a JSON object, got {type(context).__name__}"
                )
        except Exception as error:
            store.finish_run(
                run_id, status="failed", error={"type": type(error).__name__, "message": str(error)}
            )
            raise
        store.mark_running(run_id)
        node = Node(run_id=run_id, runnable=runnable, context=context or {})
        answer = _run(_executor(self).start(node, input))
        if isinstance(answer, Step) and answer.is_value:
            return record_success(answer.value, run_id)
        return expand(self, answer, then=finalize.s(run_id))

    @app.task(name=RUN, bind=True, shared=False)
    def run(self: Task, node: dict[str, Any], input: Any = None) -> Any:
        """Run one loop or action stage, or expand one pipeline or composite."""
        return expand(self, _run(_executor(self).start(Node.from_dict(node), input)))

    @app.task(name=STAGE, bind=True, shared=False)
    def stage(self: Task, previous: Any, node: dict[str, Any], index: int, input: Any = None) -> Any:
        """Stage ``index`` of a pipeline, fed the previous stage's output."""
        answer = _run(_executor(self).stage(previous, Node.from_dict(node), int(index), input))
        return expand(self, answer)

    @app.task(name=PIPELINE_DONE, bind=True, shared=False)
    def pipeline_done(self: Task, previous: Any, node: dict[str, Any]) -> Any:
        """Close a pipeline: its result is the last stage's output."""
        return _run(_executor(self).pipeline_done(previous, Node.from_dict(node)))

    @app.task(name=MERGE, bind=True, shared=False)
    def merge(self: Task, outputs: Any, node: dict[str, Any], input: Any = None, single: bool = False) -> Any:
        """Fan-in of a composite: merge its branches' outputs."""
        outputs = [outputs] if single else list(outputs)
        return expand(self, _run(_executor(self).merge(Node.from_dict(node), outputs, input)))

    @app.task(name=PROGRESS, shared=False)
    def progress(run_id: str, after_id: int = 0, limit: int = 500) -> dict[str, Any]:
        """A run's status and its events after ``after_id``, for clients that import only Celery."""
        store = get_run_store()
        record = store.get_run(str(run_id))
        rows = store.events(str(run_id), after_id=int(after_id), limit=max(1, min(int(limit), 5000)))
        return {
            "run_id": run_id,
            "status": record.status if record is not None else "unknown",
            "error": record.error if record is not None else None,
            "usage": {"input_tokens": record.input_tokens, "output_tokens": record.output_tokens}
            if record is not None
            else None,
            "events": [event for _, event in rows],
            "last_id": rows[-1][0] if rows else int(after_id),
        }

    @app.task(name=CANCEL, shared=False)
    def cancel(run_id: str) -> bool:
        """Ask every task of the run to stop at its next step."""
        get_run_store().request_cancel(str(run_id))
        return True

    install_batch_tasks(app)

    @app.task(name=FINALIZE, bind=True, shared=False)
    def finalize(self: Task, result: Any, run_id: str) -> Any:
        """Record the run's result; the run's id then answers with it."""
        return record_success(result, run_id)

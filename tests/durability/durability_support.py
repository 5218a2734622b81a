"""What the durability tests share: a worker whose run store sits behind a TCP proxy, and its client."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import AsyncResult
from sqlalchemy.engine import make_url

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import RunRecord, SqlRunStore, open_store
from agentloop.orchestration.wire import LAUNCH
from tests.services.tcp_proxy import TcpProxy
from tests.services.worker import WorkerProcess, run_worker_process
from tests.services.worker_environment import detach_result_consumer, worker_pythonpath

HERE = Path(__file__).resolve().parent
WORKFLOWS = "durability_workflows"


@dataclass
class DurabilityRig:
    """A worker whose store is reached through ``proxy`` (PostgreSQL); ``store`` is the same
    database, direct."""

    app: Celery
    store: SqlRunStore
    proxy: TcpProxy | None
    worker: WorkerProcess
    database_url: str

    def launch(
        self, runnable: str, input: Any = None, *, task_id: str | None = None, **kwargs: Any
    ) -> AsyncResult:
        """Send ``agentloop.launch`` as any producer would (the run id is the task id unless given)."""
        return self.app.send_task(
            LAUNCH, kwargs={"runnable": runnable, "input": input, **kwargs}, task_id=task_id or new_id()
        )

    def result(self, run_id: str, *, timeout: float = 120.0) -> Any:
        """The run's Celery result; past ``timeout``, an ``AssertionError`` with its record and the log."""
        try:
            return self.app.AsyncResult(run_id).get(timeout=timeout)
        except CeleryTimeoutError:
            log = "\n".join(self.worker.log_text().splitlines()[-80:])
            raise AssertionError(f"no result for {run_id}: {self.store.get_run(run_id)}\n{log}") from None

    def ended(self, run_id: str, *, timeout: float = 60.0) -> RunRecord:
        """The run once it has ended (``AssertionError`` with its record after ``timeout``)."""
        deadline = time.monotonic() + timeout
        record = self.store.get_run(run_id)
        while record is None or not record.is_finished:
            assert time.monotonic() < deadline, f"run {run_id} has not ended: {record}"
            time.sleep(0.1)
            record = self.store.get_run(run_id)
        return record


def new_id() -> str:
    return f"run-{uuid.uuid4().hex}"


@contextmanager
def running_rig(
    database_url: str,
    broker_url: str,
    *,
    retry_seconds: float,
    concurrency: int = 4,
    imports: tuple[str, ...] = (WORKFLOWS,),
    proxied: bool = True,
    env: Mapping[str, str] | None = None,
    result_backend: str | None = None,
) -> Iterator[DurabilityRig]:
    """A worker (its PostgreSQL store behind its own proxy, unless not ``proxied``) and a client app
    on a queue of their own."""
    queue = f"durability-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        server, proxy = make_url(database_url), None
        if proxied and server.get_backend_name() == "postgresql":
            proxy = stack.enter_context(TcpProxy(str(server.host), int(server.port or 5432)))
        worker = stack.enter_context(
            run_worker_process(
                broker_url=broker_url,
                result_backend=result_backend or broker_url,
                imports=list(imports),
                concurrency=concurrency,
                env={
                    "DATABASE_URL": proxy.url_of(database_url) if proxy else database_url,
                    "AGENTLOOP_STORE_RETRY_SECONDS": str(retry_seconds),
                    "AGENTLOOP_TASK_DEFAULT_QUEUE": queue,
                    "PYTHONPATH": worker_pythonpath(HERE),
                    **(env or {}),
                },
            )
        )
        store, _ = open_store(database_url, migrate=False)
        stack.callback(store.engine.dispose)
        app = create_app(
            registry=RunnableRegistry.from_modules(list(imports)),
            store=store,
            overrides={
                "broker_url": broker_url,
                "result_backend": result_backend or broker_url,
                "task_default_queue": queue,
            },
        )
        stack.callback(app.close)
        stack.callback(detach_result_consumer, app)
        yield DurabilityRig(app=app, store=store, proxy=proxy, worker=worker, database_url=database_url)

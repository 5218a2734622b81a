"""The deployment the fault scenarios attack: a real prefork worker on a private Redis (broker and
results, append-only so a restart keeps its data), the run store in a private PostgreSQL database
reached through a :class:`~tests.services.tcp_proxy.TcpProxy` the scenarios stop,
and the record-search agent's model behind a local OpenAI-protocol server (:mod:`.chaos_model`).

The test process watches from outside: it reads the run store directly (not through the proxy),
so it sees the runs while the worker's database is "down", and it sends work the way clients do:
:class:`~agentloop.orchestration.client.CeleryAgentRunner`, or a plain Celery app that knows nothing of
agentloop (another service, or an attacker).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from sqlalchemy.engine import make_url

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.store import RunStore, open_store
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer
from tests.services.postgres import private_postgres_database
from tests.services.redis_server import RedisServer, private_redis_server
from tests.services.tcp_proxy import TcpProxy
from tests.services.worker import WorkerProcess, run_worker_process
from tests.services.worker_environment import worker_pythonpath

from .brokers import BrokerKind, BrokerUnderTest, broker_under_test
from .chaos_model import API_KEY, MODEL_MAX_RETRIES, MODEL_TIMEOUT_SECONDS, chaos_responder

QUEUE = "agentloop"
#: The modules whose workflows the worker runs: the parity suite's, the durable tests' slow
#: loop, the record-search demo, the human-in-the-loop tests' (runs paused for an answer), and the
#: guarantee matrix's (``tests/faults/matrix.py``).
IMPORTS = (
    "workflows.parity",
    "workflows.matrix",
    "workflows.durable",
    "agentloop.examples.record_search.workflows",
    "workflows.human",
)
#: What a worker whose consumer broke logs (it may stay alive, consuming nothing).
BROKEN = ("Unrecoverable error", "CRITICAL/MainProcess")
#: CRITICAL lines that say nothing broke: kombu's ``ack_log_error`` logs an acknowledgement lost with
#: its connection at CRITICAL and the worker goes on (the message returns after the visibility
#: timeout and finds its step recorded; ``celery_adapter/config.py``, issue 21). A Redis restart
#: under a finished task writes one.
NOT_BROKEN = ("Couldn't ack",)


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerProfile:
    """The settings a scenario's worker runs with, beyond what every worker gets."""

    name: str
    env: Mapping[str, str] = field(default_factory=dict)


#: Short time limits, so messages of a killed worker come back within 14 s (the workload's
#: tasks take a few seconds at most: the slow loop, 2.4 s, is the longest; record_search's demo
#: took over 8 s on a machine loaded by a parallel test run, and met its soft limit).
SHORT = WorkerProfile(
    name="short",
    env={
        "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "12",
        "AGENTLOOP_TASK_TIME_LIMIT": "13",
        "AGENTLOOP_VISIBILITY_TIMEOUT": "14",
        "AGENTLOOP_UNACKED_RESTORE_SECONDS": "1",
    },
)
#: :data:`SHORT` on RabbitMQ: the time limits are short on Redis only for its visibility timeout
#: (RabbitMQ returns a dead worker's messages when its connection closes), and they are short on a
#: loaded machine for a fresh pool process's first model call, which imports the OpenAI SDK's chat
#: resources (3.3 s alone here) inside the task: a record-search run took over 8 s on the RabbitMQ
#: rig, 3.7 s on the Redis one (the private node's Erlang VM shares the 2 cores).
RABBITMQ_SHORT = {
    "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "30",
    "AGENTLOOP_TASK_TIME_LIMIT": "35",
    "AGENTLOOP_VISIBILITY_TIMEOUT": "40",
}
#: Room for store writes retried through a minute-long database outage (the default retry window),
#: and for model calls that time out and are retried.
LONG = WorkerProfile(
    name="long",
    env={
        "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "150",
        "AGENTLOOP_TASK_TIME_LIMIT": "160",
        "AGENTLOOP_VISIBILITY_TIMEOUT": "170",
        "AGENTLOOP_UNACKED_RESTORE_SECONDS": "1",
    },
)


class FaultRig:
    """The servers, the worker (restartable), the watching store and the client apps."""

    def __init__(
        self,
        *,
        database_url: str,
        proxy: TcpProxy,
        redis_server: RedisServer,
        broker: BrokerUnderTest,
        model: OpenAICompatibleServer,
        store: RunStore,
        app: Celery,
        foreign: Celery,
    ) -> None:
        self.broker = broker
        self.database_url, self.proxy, self.redis_server, self.model = (
            database_url,
            proxy,
            redis_server,
            model,
        )
        self.store, self.app, self.foreign = store, app, foreign
        self.worker: WorkerProcess | None = None
        self.profile: WorkerProfile | None = None
        self.log_mark = 0
        self._worker_stack = ExitStack()
        self.redis = redis.Redis.from_url(redis_server.url)

    @classmethod
    @contextmanager
    def open(cls, broker: BrokerKind = "redis") -> Iterator[FaultRig]:
        """Start the servers for the ``with`` block (no worker yet: :meth:`use_profile`); the
        broker is a private Redis (also the results') or a private RabbitMQ node (:mod:`.brokers`).

        Raises what the servers' helpers raise when PostgreSQL, Redis or RabbitMQ cannot be had."""
        with ExitStack() as stack:
            database_url = stack.enter_context(private_postgres_database())
            redis_server = stack.enter_context(private_redis_server(appendonly=True))
            under_test = stack.enter_context(broker_under_test(broker, redis_server, QUEUE))
            parsed = make_url(database_url)
            proxy = stack.enter_context(TcpProxy(parsed.host or "127.0.0.1", parsed.port or 5432))
            model = stack.enter_context(OpenAICompatibleServer(api_key=API_KEY, responder=chaos_responder))
            store, _ = open_store(database_url)
            stack.callback(store.engine.dispose)
            urls = {"broker_url": under_test.url, "result_backend": redis_server.url}
            app = create_app(overrides=urls)
            stack.callback(app.close)
            foreign = Celery(
                "foreign-service", broker=under_test.url, backend=redis_server.url, set_as_current=False
            )
            under_test.configure_foreign(foreign)
            stack.callback(foreign.close)
            rig = cls(
                database_url=database_url,
                proxy=proxy,
                redis_server=redis_server,
                broker=under_test,
                model=model,
                store=store,
                app=app,
                foreign=foreign,
            )
            stack.callback(rig.stop_worker)
            stack.callback(rig.redis.close)
            yield rig

    # -- the worker --------------------------------------------------------------------------------

    def worker_env(self, profile: WorkerProfile, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {
            **self._env(profile),
            **(RABBITMQ_SHORT if profile == SHORT and self.broker.kind == "rabbitmq" else {}),
            **(extra or {}),
        }

    def _env(self, profile: WorkerProfile) -> dict[str, str]:
        return {
            "DATABASE_URL": self.proxy.url_of(self.database_url),
            "OPENAI_API_KEY": API_KEY,
            "OPENAI_BASE_URL": self.model.base_url,
            "OPENAI_TIMEOUT_SECONDS": str(MODEL_TIMEOUT_SECONDS),
            "OPENAI_MAX_RETRIES": str(MODEL_MAX_RETRIES),
            "PYTHONPATH": worker_pythonpath(),
            **profile.env,
        }

    def start_worker(self, profile: WorkerProfile, *, extra_env: Mapping[str, str] | None = None) -> None:
        """A new worker with ``profile`` (the one running is stopped first)."""
        self.stop_worker()
        self.worker = self._worker_stack.enter_context(
            run_worker_process(
                broker_url=self.broker.worker_url,
                result_backend=self.redis_server.url,
                imports=IMPORTS,
                env=self.worker_env(profile, extra_env),
                concurrency=2,
                loglevel="WARNING",
                start_timeout=90,
            )
        )
        self.profile = profile
        self.log_mark = 0

    def use_profile(self, profile: WorkerProfile) -> None:
        """A live worker with ``profile``: the current one if it is, else a new one."""
        if self.worker is None or not self.worker.is_alive() or self.profile != profile:
            self.start_worker(profile)

    def stop_worker(self) -> None:
        self._worker_stack.close()
        self._worker_stack = ExitStack()
        self.worker = None

    def worker_log(self) -> str:
        return self.worker.log_text() if self.worker is not None else ""

    def worker_errors(self, since: int = 0, limit: int = 8) -> list[str]:
        """The distinct error lines of the worker's log after offset ``since`` (the last ``limit``)."""
        lines = [
            line for line in self.worker_log()[since:].splitlines() if "ERROR" in line or "CRITICAL" in line
        ]
        distinct = list(dict.fromkeys(line.split("] ", 1)[-1][:240] for line in lines))
        return distinct[-limit:]

    def pool_children(self) -> list[int]:
        """The worker's pool processes (children of its main process)."""
        return children_of(self.worker.pid) if self.worker is not None else []

    def worker_rss_kib(self) -> tuple[int, int]:
        """Resident memory of the worker's main process, and of its pool children together, in KiB."""
        if self.worker is None:
            return 0, 0
        return rss_kib(self.worker.pid), sum(rss_kib(pid) for pid in self.pool_children())

    def mark_log(self) -> None:
        """From here on, :meth:`worker_trouble` reads only what the worker logs next."""
        self.log_mark = len(self.worker_log())

    def worker_trouble(self) -> str | None:
        """Why the worker cannot work any more (it died, or its consumer broke: an unrecoverable
        error, restarts too frequent) since :meth:`mark_log`; ``None`` when it can."""
        if self.worker is None:
            return "there is no worker"
        log = self.worker_log()[self.log_mark :]
        broken = [
            line
            for line in log.splitlines()
            if any(marker in line for marker in BROKEN) and not any(quiet in line for quiet in NOT_BROKEN)
        ]
        if not self.worker.is_alive():
            return f"the worker died (exit {self.worker.returncode})" + "".join(f": {b}" for b in broken[:1])
        if broken:
            return f"the worker is alive but broken: {broken[0][:240]}"
        return None

    def worker_ok(self) -> bool:
        return self.worker_trouble() is None

    def recover(self) -> str | None:
        """After a scenario: a dead or broken worker is replaced on an emptied queue (what broke it
        would break the next one too). Returns what happened to the worker, ``None`` when it was fine."""
        note = self.worker_trouble()
        if note is None:
            return None
        assert self.profile is not None
        self.purge_queue()
        self.start_worker(self.profile)
        return note

    # -- the broker ----------------------------------------------------------------------------------

    def purge_queue(self) -> None:
        """Drop every queued and unacknowledged message (results and other keys stay)."""
        self.broker.purge()

    def broker_idle(self) -> bool:
        """Nothing queued, nothing delivered and not yet acknowledged."""
        return self.broker.idle()

    def key_census(self) -> dict[str, int]:
        """The result Redis's keys (on Redis the broker's too): ``all``, ``results``
        (``celery-task-meta-*``), ``groups`` (chords' and groups' keys, ``celery-taskset-meta-*``),
        ``no expiry`` (no time to live: nothing cleans them up); and ``channels``, the pub/sub
        channels someone is subscribed to (results awaited)."""
        keys = list(self.redis.scan_iter(count=1000))
        with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.ttl(key)
            ttls = pipe.execute()
        return {
            "all": len(keys),
            "results": sum(1 for key in keys if key.startswith(b"celery-task-meta-")),
            "groups": sum(1 for key in keys if key.startswith(b"celery-taskset-meta-")),
            "no expiry": sum(1 for ttl in ttls if ttl == -1),
            "channels": len(self.redis.pubsub_channels()),
        }

    def wait_idle(self, timeout: float) -> bool:
        """Wait for :meth:`broker_idle` twice in a row, half a second apart."""
        deadline, streak = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            streak = streak + 1 if self.broker_idle() else 0
            if streak >= 2:
                return True
            time.sleep(0.5)
        return False

    # -- clients -------------------------------------------------------------------------------------

    def launch(
        self,
        runnable: str,
        input: Any,
        *,
        context: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> str:
        """Start a run as a client does; its run id."""
        runner = CeleryAgentRunner.create(runnable=runnable, context=context, app=self.app, store=self.store)
        return runner.request_sync(input=input, run_id=run_id).run_id

    def wait_running(self, run_ids: list[str], *, at_least: int = 1, timeout: float = 30.0) -> bool:
        """Wait until ``at_least`` of the runs have started (a record that is ``running``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = [self.store.get_run(run_id) for run_id in run_ids]
            if sum(1 for r in records if r is not None and r.status == "running") >= at_least:
                return True
            time.sleep(0.1)
        return False


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def rss_kib(pid: int) -> int:
    """``VmRSS`` of ``pid`` in KiB, 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0

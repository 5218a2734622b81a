"""Worker processes for tests, configured like production.

:func:`run_worker_process` starts ``python -m celery -A agentloop worker``
as a subprocess whose whole configuration flows through the environment
variables the settings read (``orchestration/settings/``), exactly as a
deployment does; it is the integration tier (prefork pool, real broker, real
acks). A worker thread inside the test process is
:func:`agentloop.orchestration.celery_adapter.embedded.embedded_worker`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from pathlib import Path

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.errors import WorkerStartError
from agentloop.orchestration.settings import env_names

__all__ = [
    "CONFIG_ENV_VARS",
    "WorkerGroup",
    "WorkerProcess",
    "WorkerStartError",
    "run_worker_process",
]

#: Every environment variable the settings read (``agentloop.orchestration.settings.env_names``). A worker
#: process does not inherit them from the test process: it gets exactly what
#: :func:`run_worker_process` is given.
CONFIG_ENV_VARS: tuple[str, ...] = env_names()

_PROJECT_ROOT = Path(__file__).resolve().parents[3]  # the folder holding orchestration/
_LOG_TAIL_LINES = 60


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


class WorkerProcess:
    """A running ``celery worker`` subprocess (its own session: pool children share its group).

    Attributes:
        pid: the main process id (also the process-group id).
        hostname: the worker's node name, e.g. ``agentloop-test-1a2b3c@myhost``.
        broker_url, result_backend: what the worker was configured with.
    """

    def __init__(
        self,
        *,
        process: subprocess.Popen[bytes],
        hostname: str,
        log_path: Path,
        broker_url: str,
        result_backend: str,
        stop_timeout: float,
    ) -> None:
        self._process = process
        self.pid = process.pid
        self.hostname = hostname
        self.log_path = log_path
        self.broker_url = broker_url
        self.result_backend = result_backend
        self._stop_timeout = stop_timeout

    @property
    def returncode(self) -> int | None:
        """The main process's exit status, ``None`` while it runs."""
        return self._process.poll()

    def is_alive(self) -> bool:
        """Whether the main process is still running."""
        return self._process.poll() is None

    def log_text(self) -> str:
        """Everything the worker wrote so far (its log and any stdout/stderr output)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def kill(self, sig: int = signal.SIGKILL, *, group: bool = True) -> None:
        """Send ``sig`` to the worker: with ``group`` to its pool children too, as when a machine dies.

        Does not wait; use :meth:`wait` or :meth:`terminate` afterwards.
        """
        with suppress(ProcessLookupError):
            if group:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the main process to exit and return its status (``TimeoutExpired`` on timeout)."""
        return self._process.wait(timeout)

    def terminate(self, timeout: float | None = None) -> int:
        """Stop the worker: ``SIGTERM`` (warm shutdown), ``SIGKILL`` to the group after ``timeout`` s.

        Any pool child left behind is killed too. Returns the exit status; safe to call twice.
        """
        timeout = self._stop_timeout if timeout is None else timeout
        if self._process.poll() is None:
            self.kill(signal.SIGTERM, group=False)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self._process.wait()
        self.kill(signal.SIGKILL)  # orphaned pool children, if any
        return self._process.returncode

    def __repr__(self) -> str:
        return f"WorkerProcess(pid={self.pid}, hostname={self.hostname!r}, returncode={self.returncode})"


class WorkerGroup:
    """Workers started for an ``ExitStack``'s length, all told to stop at once when it unwinds.

    A prefork pool takes about 1.5 s to stop (its processes look for the shutdown once a second), so
    workers stopped one after the other add those up. When the stack unwinds to the last worker
    started here, every live worker of the group gets its warm shutdown (``SIGTERM``); each one's own
    exit (:func:`run_worker_process`) then waits for it, in the stack's order as before.
    """

    def __init__(self, stack: ExitStack) -> None:
        self._stack = stack
        self._stopping = False
        #: The workers started here, in order (stopped or killed ones too).
        self.workers: list[WorkerProcess] = []

    def start(self, worker: AbstractContextManager[WorkerProcess]) -> WorkerProcess:
        """Enter ``worker`` (a :func:`run_worker_process`) for the stack's length."""
        started = self._stack.enter_context(worker)
        self.workers.append(started)
        self._stack.callback(self._stop_all)
        return started

    def _stop_all(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        for worker in self.workers:
            if worker.is_alive():  # not yet reaped, so the pid is still this worker's
                worker.kill(signal.SIGTERM, group=False)


def _worker_env(
    *, broker_url: str, result_backend: str, imports: Sequence[str], env: Mapping[str, str] | None
) -> dict[str, str]:
    """The worker's environment: the test process's, minus its agentloop settings, plus this worker's."""
    child = {key: value for key, value in os.environ.items() if key not in CONFIG_ENV_VARS}
    child["BROKER_URL"] = broker_url
    child["RESULT_BACKEND"] = result_backend
    child["AGENTLOOP_IMPORTS"] = ",".join(imports)
    child["PYTHONUNBUFFERED"] = "1"
    paths = [str(_PROJECT_ROOT), *filter(None, [child.get("PYTHONPATH")])]
    child["PYTHONPATH"] = os.pathsep.join(paths)
    if env:
        child.update(env)
    return child


def _wait_for_ready_line(worker: WorkerProcess, *, deadline: float) -> None:
    """Wait until the worker logs that it is ready (celery's ``<hostname> ready.``, at INFO), it exits,
    or ``deadline`` passes: a ping sent before its consumer listens waits its whole timeout unanswered."""
    ready = f"{worker.hostname} ready."
    while time.monotonic() < deadline and worker.is_alive() and ready not in worker.log_text():
        time.sleep(0.02)


def _wait_until_ready(worker: WorkerProcess, *, timeout: float, logs_ready: bool) -> None:
    """Poll the worker with remote-control pings until it answers, it exits, or ``timeout`` passes.

    With ``logs_ready`` (a log level of INFO or below) the pings start once the worker logs that it is
    ready, so the first is answered at once."""
    probe = create_app(
        overrides={
            "broker_url": worker.broker_url,
            "result_backend": worker.result_backend,
            # fail fast while the broker is unreachable, so the loop keeps to its deadline
            "broker_connection_timeout": 1.0,
            "broker_connection_max_retries": 1,
        },
        main="agentloop-probe",
    )
    try:
        deadline = time.monotonic() + timeout
        if logs_ready:
            _wait_for_ready_line(worker, deadline=deadline)
        last_error: Exception | None = None
        while True:  # one ping at least, even when the ready line used the time up
            if not worker.is_alive():
                raise WorkerStartError(
                    f"worker {worker.hostname} exited with {worker.returncode} before it answered a ping; "
                    f"log tail:\n{_tail(worker.log_text())}"
                )
            try:
                replies = probe.control.ping(destination=[worker.hostname], timeout=0.5)
            except Exception as exc:  # broker not reachable yet: kombu, redis and amqp errors differ
                last_error, replies = exc, None
                time.sleep(0.2)
            if replies:
                return
            if time.monotonic() >= deadline:
                break
        cause = f" (last probe error: {last_error!r})" if last_error else ""
        raise WorkerStartError(
            f"worker {worker.hostname} did not answer a ping within {timeout}s{cause}; "
            f"log tail:\n{_tail(worker.log_text())}"
        )
    finally:
        probe.close()


def _spawn(
    command: list[str],
    *,
    workdir: Path,
    env: dict[str, str],
    hostname: str,
    broker_url: str,
    result_backend: str,
    stop_timeout: float,
) -> WorkerProcess:
    """Start ``command`` in ``workdir`` in a session of its own, its output going to ``worker.log``."""
    log_path = workdir / "worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return WorkerProcess(
        process=process,
        hostname=hostname,
        log_path=log_path,
        broker_url=broker_url,
        result_backend=result_backend,
        stop_timeout=stop_timeout,
    )


@contextmanager
def run_worker_process(
    *,
    broker_url: str,
    result_backend: str,
    imports: Sequence[str] = (),
    concurrency: int = 2,
    pool: str = "prefork",
    env: Mapping[str, str] | None = None,
    queues: Sequence[str] | None = None,
    loglevel: str = "INFO",
    hostname: str | None = None,
    app_module: str = "agentloop",
    extra_args: Sequence[str] = ("--without-mingle", "--without-gossip"),
    start_timeout: float = 30.0,
    stop_timeout: float = 5.0,
) -> Iterator[WorkerProcess]:
    """Run ``python -m celery -A agentloop worker`` for the ``with`` block.

    Configuration reaches the worker only through the environment the settings
    read: ``BROKER_URL``, ``RESULT_BACKEND`` and ``AGENTLOOP_IMPORTS`` from the
    arguments, the rest (``DATABASE_URL``, time limits, the model's) through
    ``env``; none of :data:`CONFIG_ENV_VARS` is inherited. The project root is
    put on ``PYTHONPATH`` so test modules can be listed in ``imports``.

    The worker gets a unique ``hostname`` (unless given), logs to a temporary
    file (:meth:`WorkerProcess.log_text`) and is ready once it answers a ping.
    On exit it gets ``SIGTERM``, then ``SIGKILL`` to its process group after
    ``stop_timeout`` s, and the log is removed; an exception raised in the block
    gets the log tail as a note. Raises :class:`WorkerStartError` when the
    worker exits or does not answer within ``start_timeout`` s.
    """
    hostname = hostname or f"agentloop-test-{uuid.uuid4().hex[:10]}@{socket.gethostname()}"
    options = [
        "--loglevel", loglevel, "--pool", pool, "--concurrency", str(concurrency), "--hostname", hostname,
        *(["--queues", ",".join(queues)] if queues else []),
        *extra_args,
    ]  # fmt: skip
    workdir = Path(tempfile.mkdtemp(prefix="agentloop-worker-"))
    try:
        worker = _spawn(
            [sys.executable, "-m", "celery", "-A", app_module, "worker", *options],
            workdir=workdir,
            env=_worker_env(broker_url=broker_url, result_backend=result_backend, imports=imports, env=env),
            hostname=hostname,
            broker_url=broker_url,
            result_backend=result_backend,
            stop_timeout=stop_timeout,
        )
        try:
            _wait_until_ready(worker, timeout=start_timeout, logs_ready=loglevel.upper() in ("DEBUG", "INFO"))
            try:
                yield worker
            except Exception as exc:
                exc.add_note(f"worker {hostname} log tail:\n{_tail(worker.log_text())}")
                raise
        finally:
            worker.terminate()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

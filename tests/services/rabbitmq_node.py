"""A private RabbitMQ node for the fault suite: its own ``rabbitmq-server``, restartable and killable.

The machine's RabbitMQ is shared by other sessions: it is never restarted. A test that restarts
its broker starts a node of its own instead, with its own node name, AMQP and distribution ports,
data and log folders, configuration (so ``/etc/rabbitmq``'s listener is not taken) and Erlang
cookie (``HOME`` is its folder), and talks to it with ``rabbitmqctl -n NODE``. Its data survive
:meth:`RabbitMQNode.restart` (quorum queues are on disk), as a real broker's do.

Needs RabbitMQ's scripts (``/usr/lib/rabbitmq/bin`` or ``AGENTLOOP_TEST_RABBITMQ_BIN``); without
them :func:`private_rabbitmq_node` raises :class:`~tests.services.redis_server.ServiceUnavailable`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tests.services.redis_server import _free_port, service_unavailable

__all__ = ["RabbitMQNode", "private_rabbitmq_node"]

_BIN_CANDIDATES = ("/usr/lib/rabbitmq/bin",)
_START_TIMEOUT = 90.0
_CTL_TIMEOUT = 60.0


def _rabbitmq_bin() -> Path | None:
    given = os.environ.get("AGENTLOOP_TEST_RABBITMQ_BIN", "").strip()
    for folder in (given, *_BIN_CANDIDATES):
        if folder and (Path(folder) / "rabbitmq-server").exists():
            return Path(folder)
    return None


class RabbitMQNode:
    """One private ``rabbitmq-server`` (see the module doc). :attr:`url` is its AMQP URL (vhost ``/``)."""

    def __init__(self, *, bin_dir: Path, workdir: Path) -> None:
        self.bin_dir, self.workdir = bin_dir, workdir
        self.name = f"agentloop-{uuid.uuid4().hex[:8]}@localhost"
        self.port, self.dist_port = _free_port(), _free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        self._process: subprocess.Popen[bytes] | None = None
        (workdir / "home").mkdir()
        cookie = workdir / "home" / ".erlang.cookie"
        cookie.write_text(uuid.uuid4().hex.upper())
        cookie.chmod(0o400)
        (workdir / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n"
        )
        (workdir / "enabled_plugins").write_text("[].\n")
        (workdir / "rabbitmq-env.conf").write_text("")

    @property
    def env(self) -> dict[str, str]:
        """The environment ``rabbitmq-server`` and ``rabbitmqctl`` of this node run with."""
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")},
            "HOME": str(self.workdir / "home"),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.workdir / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.workdir / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.workdir / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(self.workdir / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(self.workdir / "node.pid"),
        }

    def ctl(self, *args: str, timeout: float = _CTL_TIMEOUT) -> str:
        """``rabbitmqctl -n NODE -q ARGS``'s output; ``CalledProcessError`` when it fails."""
        done = subprocess.run(
            [str(self.bin_dir / "rabbitmqctl"), "-n", self.name, "-q", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=timeout,
        )
        return done.stdout

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = _START_TIMEOUT) -> None:
        """Start the node and wait until it has booted (no-op when it runs)."""
        if self.is_running():
            return
        with (self.workdir / "server.out").open("ab") as out:
            self._process = subprocess.Popen(
                [str(self.bin_dir / "rabbitmq-server")],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not _accepts_amqp(self.url):
            if self._process.poll() is not None:
                raise RuntimeError(f"rabbitmq-server {self.name} exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"rabbitmq-server {self.name} did not boot: {self.log_tail()}")
            time.sleep(0.5)

    def stop(self, *, kill: bool = False) -> None:
        """Stop the node: SIGTERM (RabbitMQ shuts down cleanly on it), or SIGKILL with ``kill``
        (the machine died). ``rabbitmqctl`` is not used: each call boots an Erlang VM, 10 s on a
        loaded machine."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def restart(self) -> None:
        """:meth:`stop` then :meth:`start`: on the same ports, with the same data."""
        self.stop()
        self.start()

    def log_tail(self, lines: int = 30) -> str:
        texts: list[str] = []
        for path in [self.workdir / "server.out", *sorted((self.workdir / "log").glob("*.log"))]:
            with suppress(OSError):
                texts.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(texts[-lines:])

    def __repr__(self) -> str:
        return f"RabbitMQNode(name={self.name!r}, port={self.port}, running={self.is_running()})"


def _accepts_amqp(url: str) -> bool:
    """Whether an AMQP connection to ``url`` opens (the node has booted and listens)."""
    from kombu.connection import Connection

    try:
        with Connection(url, connect_timeout=2) as connection:  # type: ignore[no-untyped-call]
            connection.connect()
            return True
    except Exception:  # refused, reset, not yet accepting logins
        return False


@contextmanager
def private_rabbitmq_node() -> Iterator[RabbitMQNode]:
    """A started private node for the ``with`` block; stopped and its folder removed after."""
    bin_dir = _rabbitmq_bin()
    if bin_dir is None:
        raise service_unavailable("no RabbitMQ scripts (rabbitmq-server) to start a private node")
    workdir = Path(tempfile.mkdtemp(prefix="agentloop-rabbitmq-"))
    node = RabbitMQNode(bin_dir=bin_dir, workdir=workdir)
    try:
        node.start()
        yield node
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)

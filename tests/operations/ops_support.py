"""Helpers of the operations tests: a real Flower process and a client for its HTTP API.

Flower gets the environment a deployment gives it (``BROKER_URL``,
``RESULT_BACKEND``, ``AGENTLOOP_IMPORTS``, ``DATABASE_URL``, the queue) and
runs with basic auth, as ``docs/deployment.md`` says it must.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.services.redis_server import RedisServer
from tests.services.worker import CONFIG_ENV_VARS, WorkerProcess

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
IMPORTS = ("workflows.parity", "workflows.operations")
FLOWER_USER, FLOWER_PASSWORD = "ops", "flower-test-password"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class HttpAnswer:
    status: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


@dataclass
class FlowerClient:
    """Flower's HTTP API with basic auth; every answer is kept in :attr:`transcript`."""

    base_url: str
    user: str | None = FLOWER_USER
    password: str | None = FLOWER_PASSWORD
    transcript: list[str] = field(default_factory=list)

    def request(
        self, method: str, path: str, *, body: Mapping[str, Any] | None = None, timeout: float = 10.0
    ) -> HttpAnswer:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        if self.user is not None:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                answer = HttpAnswer(response.status, response.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as error:
            answer = HttpAnswer(error.code, error.read().decode("utf-8", "replace"))
        self.transcript.append(f"{method} {path} -> {answer.status}\n{answer.text}")
        return answer

    def get(self, path: str, **params: Any) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        answer = self.request("GET", path + query)
        assert answer.status == 200, f"GET {path}{query}: {answer.status} {answer.text}"
        return answer.json()

    def post(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        answer = self.request("POST", path, body=body)
        assert answer.status == 200, f"POST {path}: {answer.status} {answer.text}"
        return answer.json()


@dataclass
class FlowerProcess:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def service_env(*, broker_url: str, database_url: str, queue: str) -> dict[str, str]:
    """The environment of a deployed process: the test's, minus its Celery config, plus this stack's."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in CONFIG_ENV_VARS and not key.startswith("FLOWER_")  # Flower reads FLOWER_<option>
    }
    env.update(
        {
            "BROKER_URL": broker_url,
            "RESULT_BACKEND": broker_url,
            "AGENTLOOP_IMPORTS": ",".join(IMPORTS),
            "AGENTLOOP_TASK_DEFAULT_QUEUE": queue,
            "DATABASE_URL": database_url,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@contextmanager
def run_flower(
    env: Mapping[str, str], *, extra_args: tuple[str, ...] = (), auth: bool = True, timeout: float = 30.0
) -> Iterator[FlowerProcess]:
    """``python -m celery -A agentloop flower`` on a free port of 127.0.0.1 until it answers."""
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="agentloop-flower-"))
    log_path = workdir / "flower.log"
    command = [
        sys.executable, "-m", "celery", "-A", "agentloop", "flower",
        f"--port={port}", "--address=127.0.0.1",
        *([f"--basic-auth={FLOWER_USER}:{FLOWER_PASSWORD}"] if auth else []),
        *extra_args,
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    flower = FlowerProcess(process=process, url=f"http://127.0.0.1:{port}", log_path=log_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"flower exited with {process.returncode}:\n{flower.log_text()}")
            with suppress(OSError), urllib.request.urlopen(flower.url + "/healthcheck", timeout=1) as answer:
                if answer.status == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"flower did not answer within {timeout}s:\n{flower.log_text()}")
            time.sleep(0.1)
        yield flower
    finally:
        flower.stop()
        for path in workdir.iterdir():
            path.unlink()
        workdir.rmdir()


@dataclass
class OpsStack:
    redis: RedisServer
    worker: WorkerProcess
    flower: FlowerProcess
    client: FlowerClient
    env: dict[str, str]


def wait_for_events(client: FlowerClient, *, timeout: float = 60.0, each: float = 3.0) -> None:
    """Until Flower has captured the events of a task it sent (``agentloop.ping``). Events are not
    kept for a receiver that connects later: a ping whose events went out before Flower's
    receiver listened is never seen, so another is sent every ``each`` seconds until one is."""
    deadline = time.monotonic() + timeout
    sent: list[str] = []
    while time.monotonic() < deadline:
        sent.append(client.post("/api/task/send-task/agentloop.ping")["task-id"])
        round_ends = min(deadline, time.monotonic() + each)
        while time.monotonic() < round_ends:
            for task_id in sent:
                answer = client.request("GET", f"/api/task/info/{task_id}")
                if answer.status == 200 and answer.json().get("state") == "SUCCESS":
                    return
            time.sleep(0.1)
    raise AssertionError(f"Flower saw no events of the pings {sent} within {timeout}s")

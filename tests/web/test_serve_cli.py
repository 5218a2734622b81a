"""``agentloop serve`` on the embedded defaults: one process (in-memory broker, a worker thread,
SQLite), closed by default with a printed one-off token, and the demo workflow startable at once."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int, timeout: float = 60.0) -> None:
    """Wait until something accepts connections on ``port`` (the deadline only ends a hung test)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on port {port}"
            time.sleep(0.05)


def read_until(process: subprocess.Popen[str], pattern: str, timeout: float = 60.0) -> re.Match[str]:
    """Read the process's output (on a thread: a pipe's buffered lines are invisible to select)
    until ``pattern`` shows."""
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout or ()], daemon=True).start()
    seen, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            seen += lines.get(timeout=0.5)
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        found = re.search(pattern, seen)
        if found:
            return found
    raise AssertionError(f"agentloop serve never printed {pattern!r}; it printed:\n{seen}")


#: The ``agentloop`` command, run by this interpreter.
CLI = "from agentloop.orchestration.cli import main; main()"


def test_serve_on_the_embedded_defaults_runs_the_demo_for_a_newcomer(tmp_path: Path) -> None:
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AGENTLOOP_", "OPENAI_"))}
    env.update(AGENTLOOP_HOME=str(tmp_path), COLUMNS="80", PYTHONPATH=str(ROOT))
    for name in ("BROKER_URL", "REDIS_URL", "RESULT_BACKEND", "DATABASE_URL"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-c", CLI, "serve", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        token = read_until(process, r"/ui/#token=(\S+)").group(1)
        base = f"http://127.0.0.1:{port}"
        listening(port)  # the banner is printed before uvicorn binds its socket
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, timeout=30) as client:
            assert client.get("/runs").status_code == 401  # closed by default
            assert client.get("/ui/").status_code == 200
            names = [
                r["name"]
                for r in client.get("/runnables", headers=headers).json()["runnables"]
                if r["declared"]
            ]
            started = client.post(
                "/runs", json={"runnable": "record_search.demo", "input": {}}, headers=headers
            )
            run_id = started.json()["id"]
            with client.stream("GET", f"/runs/{run_id}/events", headers=headers, timeout=120) as stream:
                body = "".join(stream.iter_text())
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)

    assert names == ["record_search.ask", "record_search.demo"]
    assert started.status_code == 202
    assert "event: end" in body and '"status":"succeeded"' in body.rsplit("event: end", 1)[1]
    assert process.returncode in (0, 130)  # 130: stopped by Ctrl-C, as a shell reports it
    assert (tmp_path / "agentloop.sqlite3").exists()

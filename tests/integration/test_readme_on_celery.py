"""The runners page's "On Celery" (``docs/concepts/runners.md``, once the README's), run as a user
would: its module written to a fresh folder, then its two commands run by a shell's rules (the
worker in the background, the trigger waiting for the result).

The code is read from the page, so the section and this test cannot drift apart. The only change is
the server: the page's ``redis://127.0.0.1:6379/0`` becomes a private Redis of this test's own.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers.redis_server import RedisServer, ServiceUnavailable, private_redis_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "concepts" / "runners.md"
SECTION = "## On Celery"
PAGE_REDIS = "redis://127.0.0.1:6379/0"
#: The machine's settings a new user's shell would not have.
CLEARED = ("BROKER_URL", "REDIS_URL", "RESULT_BACKEND", "DATABASE_URL", "AGENTLOOP_IMPORTS", "OPENAI_API_KEY")


def section_blocks() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))  # the next section (models)
    return re.findall(r"```(\w+)\n(.*?)```", text[start:end], re.DOTALL)


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    try:
        with private_redis_server() as server:
            yield server
    except ServiceUnavailable as unavailable:
        pytest.skip(unavailable.reason)  # a failure under CI=true (tests/ci_policy.py)


def test_the_module_and_commands_run_a_count_on_a_worker(tmp_path: Path, redis: RedisServer) -> None:
    [(python, module), (shell, commands)] = section_blocks()
    assert (python, shell) == ("python", "sh") and module.startswith("# counting.py\n")
    (tmp_path / "counting.py").write_text(module, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key not in CLEARED}
    env.update(
        {"AGENTLOOP_HOME": str(tmp_path / ".agentloop"), "PYTHONPATH": str(tmp_path), "COLUMNS": "120"}
    )
    worker_line, trigger_line = [line for line in commands.splitlines() if line.strip()]
    assert worker_line.endswith(" &") and PAGE_REDIS in worker_line and PAGE_REDIS in trigger_line

    worker = subprocess.Popen(
        command(worker_line[:-2], redis),
        cwd=tmp_path,
        env={**env, **assignments(worker_line[:-2], redis)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        triggered = subprocess.run(
            command(trigger_line, redis),
            cwd=tmp_path,
            env={**env, **assignments(trigger_line, redis)},
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            _, worker_log = worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            _, worker_log = worker.communicate()

    assert triggered.returncode == 0, triggered.stdout + triggered.stderr + worker_log[-3000:]
    # on Redis the command starts no worker of its own: the background one ran the count
    assert "CountTo (root) done: complete" in triggered.stdout
    assert triggered.stdout.strip().splitlines()[-1] == "3"


def assignments(line: str, redis: RedisServer) -> dict[str, str]:
    """The ``NAME=value`` words a shell line starts with (the page's Redis made the private one)."""
    found = {}
    for word in shlex.split(line):
        name, equals, value = word.partition("=")
        if not equals or not name.isidentifier():
            break
        found[name] = value.replace(PAGE_REDIS, redis.url)
    return found


def command(line: str, redis: RedisServer) -> list[str]:
    """The command of a shell line, after its assignments, from this environment's ``bin``."""
    words = shlex.split(line)[len(assignments(line, redis)) :]
    return [str(Path(sys.executable).parent / words[0]), *words[1:]]

"""The docs' commands that start a worker on Redis, run as a user would: the runners page's "On
Celery" (``docs/concepts/runners.md``, once the README's) and the tutorial's "On a worker"
(``docs/tutorial.md``). Each page's module is written to a fresh folder, then its two commands run
by ``sh`` as typed (the worker in the background, the trigger waiting for the result).

The code is read from the pages, so the sections and this test cannot drift apart. The only change
is the server: the pages' ``redis://127.0.0.1:6379/0`` becomes a private Redis of this test's own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.newcomer import a_users_environment, typed
from tests.services.redis_server import RedisServer
from tests.services.worker_environment import redis_fixture

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUNNERS = ROOT / "docs" / "concepts" / "runners.md"
TUTORIAL = ROOT / "docs" / "tutorial.md"
PAGE_REDIS = "redis://127.0.0.1:6379/0"


def section_blocks(page: Path, heading: str) -> list[tuple[str, str]]:
    """``(language, code)`` of each fenced block under ``heading``, up to the next section."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + len(heading) + 1)
    return re.findall(r"```(\w+)\n(.*?)```", text[start : end if end != -1 else None], re.DOTALL)


redis_server = redis_fixture("module")


def run_on_a_worker(folder: Path, redis_server: RedisServer, module: str, commands: str) -> str:
    """Write ``module`` under the name its first line gives, start the worker line in the
    background, run the trigger line, stop the worker; the trigger's output."""
    assert module.startswith("# counting.py\n")
    (folder / "counting.py").write_text(module, encoding="utf-8")
    env = a_users_environment(folder)
    worker_line, trigger_line = [line for line in commands.splitlines() if line.strip()]
    assert worker_line.endswith(" &") and PAGE_REDIS in worker_line and PAGE_REDIS in trigger_line

    # typed as the page gives them (its Redis made this test's own), in the folder of counting.py,
    # with no PYTHONPATH: the worker line in the background, the trigger line after it
    worker = subprocess.Popen(
        ["sh", "-c", worker_line[:-2].replace(PAGE_REDIS, redis_server.url)],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        triggered = typed(folder, trigger_line.replace(PAGE_REDIS, redis_server.url), env, timeout=180)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            _, worker_log = worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            _, worker_log = worker.communicate(timeout=30)  # stderr held outside the group: fail, not hang

    assert triggered.returncode == 0, triggered.stdout + triggered.stderr + worker_log[-3000:]
    return triggered.stdout  # on Redis the command starts no worker of its own: the background one ran it


def test_the_runners_page_module_and_commands_run_a_count_on_a_worker(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    [(python, module), (shell, commands)] = section_blocks(RUNNERS, "## On Celery")
    assert (python, shell) == ("python", "sh")

    printed = run_on_a_worker(tmp_path, redis_server, module, commands)

    assert "CountTo (root) done: complete" in printed
    assert printed.strip().splitlines()[-1] == "3"


def test_the_tutorials_composite_runs_on_a_redis_worker_with_its_commands(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    (python, module), _ = section_blocks(TUTORIAL, "## A composite: fan out, merge")
    [_, (shell, commands)] = section_blocks(TUTORIAL, "## On a worker")
    assert (python, shell) == ("python", "sh")

    printed = run_on_a_worker(tmp_path, redis_server, module, commands)

    assert "CountAll (root) done: 3 of 3 branches" in printed
    result = json.loads(printed[printed.rindex("\n{") :])
    assert result == {"to-1": 1, "to-2": 2, "to-3": 3}

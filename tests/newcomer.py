"""A new user's shell, for the tests that run what a user would: none of the machine's settings, the
project's commands found on ``PATH``, and the docs' shell lines run by ``sh`` as a reader types them,
in the reader's folder (:func:`typed`), with no ``PYTHONPATH``: whatever a command imports from that
folder, it finds as a user's command would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The machine's settings a new user's shell would not have.
MACHINE_SETTINGS = (
    "BROKER_URL",
    "REDIS_URL",
    "RESULT_BACKEND",
    "DATABASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "AGENTLOOP_MODEL_PROVIDER",
    "AGENTLOOP_IMPORTS",
    "PYTEST_ADDOPTS",
    "PYTHONPATH",
)

#: The virtualenv's ``bin``, where ``agentloop`` and ``celery`` are installed: first on a user's ``PATH``.
BIN = Path(sys.executable).parent


def a_users_environment(folder: Path) -> dict[str, str]:
    """This process's environment without :data:`MACHINE_SETTINGS`, for a user working in ``folder``
    (their home of runs under it, the virtualenv's ``bin`` first on ``PATH``, a 120-column terminal)."""
    env = {key: value for key, value in os.environ.items() if key not in MACHINE_SETTINGS}
    env.update(
        {
            "AGENTLOOP_HOME": str(folder / ".agentloop"),
            "PATH": os.pathsep.join([str(BIN), env.get("PATH", "")]),
            "COLUMNS": "120",
        }
    )
    return env


def typed(
    folder: Path, lines: str, env: dict[str, str] | None = None, *, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``lines`` typed into a new user's shell in ``folder``: ``sh -c`` runs them as written (``export``,
    ``NAME=value command``, comments), with :func:`a_users_environment` unless ``env`` is given."""
    return subprocess.run(
        ["sh", "-c", lines],
        cwd=folder,
        env=a_users_environment(folder) if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def typed_one_by_one(
    folder: Path, block: str, env: dict[str, str] | None = None, *, timeout: float = 300
) -> list[tuple[str, subprocess.CompletedProcess[str]]]:
    """Each command line of the shell ``block``, typed in turn (:func:`typed`), each after the block's
    ``export`` lines before it (what the reader's shell holds by then): ``(line, what it did)``."""
    exports: list[str] = []
    done = []
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith("export "):
            exports.append(line)
            continue
        done.append((line, typed(folder, "\n".join([*exports, line]), env, timeout=timeout)))
    return done

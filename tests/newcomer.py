"""A new user's shell, for the tests that run what a user would: none of the machine's settings."""

from __future__ import annotations

import os
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
)


def a_users_environment(folder: Path) -> dict[str, str]:
    """This process's environment without :data:`MACHINE_SETTINGS`, for a user working in ``folder``
    (their home of runs under it, their modules importable from it, a 120-column terminal)."""
    env = {key: value for key, value in os.environ.items() if key not in MACHINE_SETTINGS}
    env.update({"AGENTLOOP_HOME": str(folder / ".agentloop"), "PYTHONPATH": str(folder), "COLUMNS": "120"})
    return env

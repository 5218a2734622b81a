"""``.pre-commit-config.yaml`` runs what CI runs first: each hook's program is one the project's
virtualenv has, and the files it names exist (a renamed test would make the hook pass on nothing)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def hooks() -> list[dict[str, Any]]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    return [hook for repo in config["repos"] for hook in repo["hooks"]]


def test_the_hooks_are_those_ci_runs_first() -> None:
    assert [hook["id"] for hook in hooks()] == ["ruff", "ruff-format", "mypy", "layout"]
    ci = (ROOT / ".ci" / "run").read_text()
    for command in (".venv/bin/ruff check", ".venv/bin/ruff format --check", ".venv/bin/mypy"):
        assert command in ci


def test_every_hook_runs_a_program_and_files_that_exist() -> None:
    for hook in hooks():
        words = shlex.split(hook["entry"])
        assert words[0].startswith(".venv/bin/"), hook["id"]
        named = [word for word in words[1:] if word.startswith("tests/")]
        assert all((ROOT / word).is_file() for word in named), (hook["id"], named)

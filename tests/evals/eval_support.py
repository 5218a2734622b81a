"""What the evaluation tests share: datasets written to files, the CLI invoked, reports read."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.cli.cli_support import invoke

__all__ = ["invoke", "kept", "write_dataset"]


def write_dataset(path: Path, cases: Iterable[Any]) -> Path:
    """``cases`` as a JSON Lines file (a string is written as the line it is)."""
    path.write_text(
        "".join((case if isinstance(case, str) else json.dumps(case)) + "\n" for case in cases),
        encoding="utf-8",
    )
    return path


def kept(eval_home: Path) -> list[dict[str, Any]]:
    """The evaluations kept under the test's ``AGENTLOOP_HOME``, oldest first."""
    files = sorted((eval_home / ".agentloop" / "evals").glob("*.json"))
    return sorted((json.loads(file.read_text()) for file in files), key=lambda report: report["created_at"])

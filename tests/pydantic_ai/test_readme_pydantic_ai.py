"""The how-to "Run pydantic-ai agents durably" (``docs/how-to/pydantic-ai.md``): its Python block
runs as written and prints what its comments say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.docs.docs_pages import section

ROOT = Path(__file__).resolve().parents[2]


def test_the_pages_example_runs_as_written() -> None:
    [block] = [
        b
        for b in section("docs/how-to/pydantic-ai.md", "# Run pydantic-ai agents durably")
        if b.language == "python"
    ]
    printed = [
        line[2:] for line in block.code.splitlines() if line.startswith("# {") or line.startswith("# [")
    ]
    done = subprocess.run(
        [sys.executable, "-c", block.code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == printed

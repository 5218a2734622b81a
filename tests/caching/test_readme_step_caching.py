"""The README's "Step caching": its Python block runs and prints what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Step caching"


def test_the_readme_example_runs_as_written() -> None:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION) :].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    printed = [line[2:] for line in code.group(1).splitlines() if line.startswith("# ")]
    done = subprocess.run(
        [sys.executable, "-c", code.group(1)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == printed

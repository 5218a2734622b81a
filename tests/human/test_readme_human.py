"""The how-to "People in the loop" (``docs/how-to/human.md``, once the README's "A person in the
loop"): its Python block runs and prints what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "human.md"


def test_the_readme_example_runs_as_written() -> None:
    code = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert code is not None
    printed = [line[2:] for line in code.group(1).splitlines() if line.startswith("# {")]
    done = subprocess.run(
        [sys.executable, "-c", code.group(1)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == printed

"""The how-to "Stream model output" (``docs/how-to/streaming.md``, once the README's "Streamed model
output"): its Python block runs and prints what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "streaming.md"


def test_the_readme_example_runs_as_written() -> None:
    code = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert code is not None
    lines = code.group(1).splitlines()
    last_code = max(index for index, line in enumerate(lines) if not line.startswith("# "))
    printed = [line[2:] for line in lines[last_code + 1 :]]
    done = subprocess.run(
        [sys.executable, "-c", code.group(1)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert printed and done.stdout.splitlines() == printed

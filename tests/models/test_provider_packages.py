"""The provider subpackages, ``agentloop.orchestration.llm.openai`` and ``.anthropic``, are named like
the SDKs they wrap and never stand in for them: every import is absolute (``tests/test_layout.py``),
so ``openai`` and ``anthropic`` are the installed SDKs. (Only a path that puts ``llm/`` itself on
``sys.path``, a script started inside that folder, would find them first, as it would any folder
named like a library; nothing in the project does.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import anthropic, openai
from agentloop.orchestration.llm.anthropic import processor as anthropic_processor
from agentloop.orchestration.llm.openai import processor as openai_processor
assert openai_processor.AsyncOpenAI is openai.AsyncOpenAI
assert anthropic_processor.AsyncAnthropic is anthropic.AsyncAnthropic
print(openai.__file__)
print(anthropic.__file__)
"""


def test_the_processors_import_the_sdks_not_their_own_packages(tmp_path: Path) -> None:
    # a fresh interpreter, so that the processors' modules are the first to import the SDKs
    done = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    files = [Path(line) for line in done.stdout.split()]
    ours = (ROOT / "agentloop",)
    assert len(files) == 2 and not any(file.is_relative_to(folder) for file in files for folder in ours), (
        files
    )

"""The README cannot drift: every code block in it is run as written by a test, or says why not.

A block that is not meant to run carries a ``<!-- not run: REASON -->`` line just before it (an
HTML comment: readers of the rendered README do not see it); every other block is listed in
:data:`RUN_BY` with the test that reads it from README.md and runs it. A new block with neither fails
here. The blocks no other test runs are run below: the two loops of "A loop in five minutes" and
the testing kit's example test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>.+?) -->")

#: ``(heading, first line of the block)`` -> the test that runs the block as it is written.
RUN_BY = {
    ("## A loop in five minutes", "from agentloop import BaseAgentLoop, InlineAgentRunner"): (
        "tests/test_readme_blocks.py"
    ),
    ("## A loop in five minutes", "from pydantic import BaseModel"): "tests/test_readme_blocks.py",
    ("## A typed step, end to end", "# trips.py"): "tests/typed_steps/test_readme_typed_step.py",
    ("## A typed step, end to end", "# test_trips.py"): "tests/typed_steps/test_readme_typed_step.py",
    (
        "## A typed step, end to end",
        "export AGENTLOOP_IMPORTS=trips",
    ): "tests/typed_steps/test_readme_typed_step.py",
    ("## On Celery", "# counting.py"): "tests/integration/test_readme_on_celery.py",
    (
        "## On Celery",
        "AGENTLOOP_IMPORTS=counting REDIS_URL=redis://127.0.0.1:6379/0 celery -A agentloop worker &",
    ): ("tests/integration/test_readme_on_celery.py"),
    ("### The wire contract (for other services)", "import uuid"): "tests/edge/test_readme_wire_example.py",
    ("## A person in the loop", "import agentloop"): "tests/human/test_readme_human.py",
    ("## Step caching", "import agentloop"): "tests/caching/test_readme_step_caching.py",
    ("## Streamed model output", "import agentloop"): "tests/streaming/test_readme_streaming.py",
    ("## Tests", "# conftest.py (or run pytest with -p agentloop.testing)"): "tests/test_readme_blocks.py",
    ("## Tests", "import pytest"): "tests/test_readme_blocks.py",
}


@dataclass(frozen=True)
class Block:
    heading: str
    language: str
    code: str
    not_run: str | None  # the reason, when the block says it is not run

    @property
    def key(self) -> tuple[str, str]:
        return self.heading, self.code.splitlines()[0] if self.code else ""


def readme_blocks() -> list[Block]:
    """Every fenced block of README.md, under the heading it follows."""
    blocks: list[Block] = []
    heading, fence, before = "", None, ""
    body: list[str] = []
    for line in README.read_text(encoding="utf-8").splitlines():
        if fence is not None:
            if line.startswith("```"):
                marker = NOT_RUN.fullmatch(before.strip())
                blocks.append(Block(heading, fence, "\n".join(body), marker["reason"] if marker else None))
                fence, body, before = None, [], line
            else:
                body.append(line)
            continue
        if line.startswith("```"):
            fence = line[3:].strip()
            continue
        if line.startswith("#"):
            heading = line
        if line.strip():
            before = line
    assert fence is None, "README.md ends inside a code block"
    return blocks


def section(heading: str) -> list[Block]:
    return [block for block in readme_blocks() if block.heading == heading]


def test_every_block_is_run_by_a_test_or_says_why_not() -> None:
    unaccounted = []
    for block in readme_blocks():
        if block.not_run is not None:
            assert block.key not in RUN_BY, f"{block.key} is marked not run but listed as run"
            assert len(block.not_run) > 20, f"{block.key}: say why it is not run"
            continue
        runner = RUN_BY.get(block.key)
        if runner is None:
            unaccounted.append(block.key)
            continue
        test = (ROOT / runner).read_text(encoding="utf-8")
        heading = block.heading.lstrip("# ")
        assert "README" in test and heading.split(" (")[0] in test, (
            f"{runner} does not read {block.heading!r}"
        )
    assert unaccounted == [], "README blocks no test runs (list them in RUN_BY, or mark them not run)"


def test_every_block_listed_as_run_is_in_the_readme() -> None:
    assert set(RUN_BY) <= {block.key for block in readme_blocks()}


def test_the_loop_in_five_minutes_runs_as_written() -> None:
    block, _ = section("## A loop in five minutes")

    done = subprocess.run(
        [sys.executable, "-c", block.code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )

    assert done.returncode == 0, done.stderr
    *events, result = done.stdout.splitlines()
    assert result == "3"  # after started/progress/completed events, as its comment says
    statuses = [re.search(r"status=<ProgressStatus\.(\w+)", event)[1] for event in events]  # type: ignore[index]
    assert statuses == ["STARTED", "PROGRESS", "PROGRESS", "PROGRESS", "COMPLETED"]


def test_the_typed_state_example_runs_and_prints_what_it_says() -> None:
    _, block = section("## A loop in five minutes")
    printed = [line[2:] for line in block.code.splitlines() if line.startswith("# ")]

    done = subprocess.run(
        [sys.executable, "-c", block.code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == printed == ["goal=2 n=2"]


def test_the_testing_kit_example_runs_as_a_users_test(tmp_path: Path) -> None:
    [install, conftest, example] = section("## Tests")
    assert install.not_run is not None and (conftest.language, example.language) == ("python", "python")
    # the suite opts in to the kit's plugin in its conftest.py, as the README says
    (tmp_path / "conftest.py").write_text(conftest.code + "\n", encoding="utf-8")
    (tmp_path / "test_my_step.py").write_text(example.code + "\n", encoding="utf-8")

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_step.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


@pytest.mark.parametrize("heading", sorted({block.heading for block in readme_blocks() if block.not_run}))
def test_a_block_not_run_says_which_test_covers_it_or_that_it_is_not_code(heading: str) -> None:
    for block in section(heading):
        if block.not_run is not None:
            assert "tests/" in block.not_run or "not code" in block.not_run, block.not_run

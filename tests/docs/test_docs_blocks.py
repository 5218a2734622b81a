"""The README and the site cannot drift from the code: every code block of README.md and of every
page under docs/ is run as written by a test, or says why not.

A block that is not run carries a ``<!-- not run: REASON -->`` line just before it (an HTML
comment: readers do not see it), whose reason names the test that covers what it does, or says
the block is not code (a diagram, a listing, an excerpt). Every other block is listed in
:data:`RUN_BY` with the test that reads it from its page, under its heading, and runs it. A new
block with neither fails here. The blocks no other test runs are run below: the five-minute loop
(README and tutorial, the same code), the typed-state loop, the tutorial's composite in-process
and on a worker, and the testing kit's example as a user's test suite whose conftest opts in to
the kit's plugin.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from docs_pages import ROOT, Block, all_blocks, section

from tests.newcomer import typed, typed_one_by_one

THIS = "tests/docs/test_docs_blocks.py"
ON_CELERY = "tests/integration/test_readme_on_celery.py"
EVALS = "tests/evals/test_readme_evals.py"
MCP_PAGE = "tests/mcp/test_readme_mcp.py"
#: ``(page, heading, first line of the block)`` -> the test that runs the block as it is written.
RUN_BY = {
    (
        "README.md",
        "## A loop in five minutes",
        "from agentloop import BaseAgentLoop, InlineAgentRunner",
    ): THIS,
    (
        "docs/tutorial.md",
        "## A loop in five minutes",
        "from agentloop import BaseAgentLoop, InlineAgentRunner",
    ): THIS,
    ("docs/concepts/loops.md", "## Typed state", "from pydantic import BaseModel"): THIS,
    (
        "docs/tutorial.md",
        "## A typed step, end to end",
        "# trips.py",
    ): "tests/typed_steps/test_readme_typed_step.py",
    (
        "docs/tutorial.md",
        "## A typed step, end to end",
        "# conftest.py",
    ): "tests/typed_steps/test_readme_typed_step.py",
    (
        "docs/tutorial.md",
        "## A typed step, end to end",
        "# test_trips.py",
    ): "tests/typed_steps/test_readme_typed_step.py",
    (
        "docs/tutorial.md",
        "## A typed step, end to end",
        "# pytest.ini",
    ): "tests/typed_steps/test_readme_typed_step.py",
    (
        "docs/tutorial.md",
        "## A typed step, end to end",
        "export AGENTLOOP_IMPORTS=trips",
    ): "tests/typed_steps/test_readme_typed_step.py",
    ("docs/tutorial.md", "## A composite: fan out, merge", "# counting.py"): THIS,
    ("docs/tutorial.md", "## A composite: fan out, merge", "# run_inline.py"): THIS,
    ("docs/tutorial.md", "## On a worker", "export AGENTLOOP_IMPORTS=counting"): THIS,
    (
        "docs/tutorial.md",
        "## On a worker",
        "AGENTLOOP_IMPORTS=counting REDIS_URL=redis://127.0.0.1:6379/0 celery -A agentloop worker &",
    ): ON_CELERY,
    ("docs/concepts/runners.md", "## On Celery", "# counting.py"): ON_CELERY,
    (
        "docs/concepts/runners.md",
        "## On Celery",
        "AGENTLOOP_IMPORTS=counting REDIS_URL=redis://127.0.0.1:6379/0 celery -A agentloop worker &",
    ): ON_CELERY,
    ("docs/concepts/wire.md", "# The wire contract", "import uuid"): "tests/edge/test_readme_wire_example.py",
    ("docs/how-to/human.md", "# People in the loop", "import agentloop"): "tests/human/test_readme_human.py",
    ("docs/how-to/mcp.md", "## A server's tools as actions", "# weather_server.py"): MCP_PAGE,
    ("docs/how-to/mcp.md", "## A server's tools as actions", "# agent.py"): MCP_PAGE,
    (
        "docs/how-to/pydantic-ai.md",
        "# Run pydantic-ai agents durably",
        "from pydantic import BaseModel",
    ): "tests/pydantic_ai/test_readme_pydantic_ai.py",
    (
        "docs/how-to/caching.md",
        "# Cache steps",
        "import agentloop",
    ): "tests/caching/test_readme_step_caching.py",
    ("docs/how-to/streaming.md", "# Stream model output", "import agentloop"): (
        "tests/streaming/test_readme_streaming.py"
    ),
    (
        "docs/how-to/testing.md",
        "# Test your agents with the kit",
        "# conftest.py (or run pytest with -p agentloop.testing)",
    ): THIS,
    ("docs/how-to/testing.md", "# Test your agents with the kit", "import pytest"): THIS,
    ("README.md", "## Regression tests and evals", "# greet.py"): EVALS,
    (
        "README.md",
        "## Regression tests and evals",
        '{"id": "ada", "input": "Ada", "expected": "Hello, Ada!"}',
    ): EVALS,
    ("README.md", "## Regression tests and evals", "export AGENTLOOP_IMPORTS=greet"): EVALS,
    ("docs/how-to/evals.md", "## A first evaluation", "# greet.py"): EVALS,
    (
        "docs/how-to/evals.md",
        "## A first evaluation",
        '{"id": "ada", "input": "Ada", "expected": "Hello, Ada!"}',
    ): EVALS,
    ("docs/how-to/evals.md", "## A first evaluation", "export AGENTLOOP_IMPORTS=greet"): EVALS,
    ("docs/how-to/evals.md", "## Scorers", "# scorers.py"): EVALS,
    ("README.md", "## Regression tests and evals", "export AGENTLOOP_IMPORTS=trips"): (
        "tests/docs/test_readme_replay.py"
    ),
    (
        "README.md",
        "## Regression tests and evals",
        '# test_plan_replays.py (conftest.py: pytest_plugins = ["agentloop.testing"])',
    ): ("tests/docs/test_readme_replay.py"),
}


def run_python(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def printed_by(code: str) -> list[str]:
    """What a block says it prints: its comment lines after its last line of code."""
    lines = code.splitlines()
    last_code = max(index for index, line in enumerate(lines) if line and not line.startswith("#"))
    return [line[2:] for line in lines[last_code + 1 :] if line.startswith("# ")]


def test_every_block_is_run_by_a_test_or_says_why_not() -> None:
    unaccounted = []
    for block in all_blocks():
        if block.not_run is not None:
            assert block.key not in RUN_BY, f"{block.key} is marked not run but listed as run"
            assert len(block.not_run) > 20, f"{block.key}: say why it is not run"
            assert any(word in block.not_run for word in ("tests/", ".ci/run", "not code")), (
                f"{block.key}: say which test covers it, or that it is not code ({block.not_run})"
            )
            continue
        runner = RUN_BY.get(block.key)
        if runner is None:
            unaccounted.append(block.key)
            continue
        test = (ROOT / runner).read_text(encoding="utf-8")
        heading = block.heading.lstrip("# ").split(" (")[0]
        assert block.page in test and heading in test, f"{runner} does not read {block.page}'s {heading!r}"
    assert unaccounted == [], "blocks no test runs (list them in RUN_BY, or mark them not run)"


def test_every_block_listed_as_run_is_on_its_page() -> None:
    assert set(RUN_BY) <= {block.key for block in all_blocks()}


def loop_in_five_minutes(page: str) -> Block:
    [block] = section(page, "## A loop in five minutes")
    return block


def test_the_readme_and_tutorial_loops_run_as_written_and_agree() -> None:
    readme, tutorial = loop_in_five_minutes("README.md"), loop_in_five_minutes("docs/tutorial.md")
    assert readme.code == tutorial.code

    *events, result = run_python(readme.code)

    assert result == "3"  # after started/progress/completed events, as its comment says
    statuses = [re.search(r"status=<ProgressStatus\.(\w+)", event)[1] for event in events]  # type: ignore[index]
    assert statuses == ["STARTED", "PROGRESS", "PROGRESS", "PROGRESS", "COMPLETED"]


def test_the_typed_state_loop_runs_and_prints_what_it_says() -> None:
    [block] = section("docs/concepts/loops.md", "## Typed state")

    printed = run_python(block.code)

    assert printed == printed_by(block.code) == ["goal=2 n=2"]


def write_the_composite(folder: Path) -> tuple[str, str]:
    module, script = section("docs/tutorial.md", "## A composite: fan out, merge")
    for block in (module, script):
        (folder / block.code.splitlines()[0].removeprefix("# ")).write_text(
            block.code + "\n", encoding="utf-8"
        )
    return module.code, script.code


def test_the_tutorials_composite_runs_in_process_as_written(tmp_path: Path) -> None:
    _, script = write_the_composite(tmp_path)

    done = typed(tmp_path, "python run_inline.py")  # as a reader runs the script they saved
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()

    assert printed == printed_by(script) == ["{'to-1': 1, 'to-2': 2, 'to-3': 3}"]


def test_the_tutorials_composite_runs_on_a_worker_with_its_commands(tmp_path: Path) -> None:
    write_the_composite(tmp_path)
    [commands] = section("docs/tutorial.md", "## On a worker")[:1]

    # typed as the page gives them, in the folder of counting.py, with no PYTHONPATH
    [(line, triggered)] = typed_one_by_one(tmp_path, commands.code)

    assert line.startswith("agentloop trigger counting.count_all")
    assert triggered.returncode == 0, triggered.stdout + triggered.stderr
    answer = json.loads(triggered.stdout)
    assert answer["status"] == "succeeded"
    assert answer["result"] == {"to-1": 1, "to-2": 2, "to-3": 3}  # what the page says it prints


def test_the_testing_kit_example_runs_as_a_users_test_suite(tmp_path: Path) -> None:
    install, conftest, example = section("docs/how-to/testing.md", "# Test your agents with the kit")
    assert install.not_run is not None and conftest.language == example.language == "python"
    # the suite opts in to the kit's plugin in its conftest.py, as the page says: no -p below
    assert 'pytest_plugins = ["agentloop.testing"]' in conftest.code.splitlines()
    (tmp_path / "conftest.py").write_text(conftest.code + "\n", encoding="utf-8")
    (tmp_path / "test_my_step.py").write_text(example.code + "\n", encoding="utf-8")

    done = typed(tmp_path, "pytest -q -p no:cacheprovider test_my_step.py")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout

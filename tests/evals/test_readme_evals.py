"""The README's "Regression tests and evals" and the how-to page's "A first evaluation" and "Scorers"
(``docs/how-to/evals.md``), run as written: the pages' modules and dataset written to a fresh folder,
their commands typed line by line into a new user's shell in that folder (``sh``, no ``PYTHONPATH``),
on the embedded defaults.

The code is read from the pages, so they and this test cannot drift apart.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.docs.docs_pages import Block, section
from tests.newcomer import typed_one_by_one


def run_the_page(folder: Path, blocks: list[Block]) -> str:
    """Write the blocks' files (a python block's first line names it; the JSON block is
    ``cases.jsonl``), type the shell block's commands, and return what they printed (each must exit 0)."""
    [commands] = [block for block in blocks if block.language == "sh" and block.not_run is None]
    for block in blocks:
        if block.language == "python":
            (folder / block.code.splitlines()[0].removeprefix("# ")).write_text(block.code + "\n")
        elif block.language == "json":
            (folder / "cases.jsonl").write_text(block.code + "\n")
    printed = []
    # typed as the page gives them, in the folder of its modules, with no PYTHONPATH
    for line, done in typed_one_by_one(folder, commands.code):
        assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
        printed.append(done.stdout)
    return "\n".join(printed)


def cases(report: dict[str, Any]) -> dict[str, tuple[bool, str]]:
    return {case["id"]: (case["passed"], case["scores"]["exact"]["reason"]) for case in report["cases"]}


def test_the_readme_section_runs_as_written(tmp_path: Path) -> None:
    # the eval half of the section (its replay half is tests/docs/test_readme_replay.py's)
    blocks = [
        block
        for block in section("README.md", "## Regression tests and evals")
        if "replay" not in block.code and not block.code.startswith("# test_plan_replays.py")
    ]

    printed = run_the_page(tmp_path, blocks)

    before = json.loads((tmp_path / "before.json").read_text())
    assert cases(before) == {"ada": (True, ""), "eve": (False, 'expected "Hi, Eve!", got "Hello, Eve!"')}
    assert "passed 1 of 2 (50%)" in printed  # as the section says: ada passes, eve fails
    assert "2 same" in printed
    assert "<h1>Evaluation of greet</h1>" in (tmp_path / "report.html").read_text()


def test_the_how_to_page_runs_as_written(tmp_path: Path) -> None:
    blocks = [
        *section("docs/how-to/evals.md", "## A first evaluation"),
        *section("docs/how-to/evals.md", "## Scorers"),
    ]

    printed = run_the_page(tmp_path, blocks)

    before = json.loads((tmp_path / "before.json").read_text())
    after = json.loads((tmp_path / "after.json").read_text())
    assert cases(before) == cases(after)
    assert cases(before)["eve"] == (False, 'expected "Hi, Eve!", got "Hello, Eve!"')  # as the page says
    assert (before["mode"], after["mode"]) == ("inline", "celery")
    [scored] = [
        json.loads(path.read_text())
        for path in (tmp_path / ".agentloop" / "evals").glob("*.json")
        if "scorers:friendly" in path.read_text()
    ]
    assert scored["scorers"] == ["scorers:friendly", "type:scorers:Greeting"]
    assert scored["aggregate"]["passed"] == 3
    assert "3 same" in printed
    assert printed.count("eval-") >= 3  # eval list shows the three evaluations

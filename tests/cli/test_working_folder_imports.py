"""The commands that import a user's modules by name find them in the folder they are run from, as
``celery`` does: typed in a new user's shell in that folder, with no ``PYTHONPATH`` (the docs' own
commands are run so by tests/docs/, tests/evals/test_readme_evals.py and
tests/typed_steps/test_readme_typed_step.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentloop.orchestration.cli import app
from tests.newcomer import typed

#: A user's module: a loop, and a typed step for ``tools sync`` to find.
MINE = """
from pydantic import BaseModel

from agentloop import BaseActionStage, BaseAgentLoop, TypedToolAction, register, standard_context


class Answer(BaseModel):
    text: str


class Reply(TypedToolAction[Answer]):
    name = "mine_reply"
    description = "Reply."

    def build_instruction(self, *, arguments, context):
        return "Reply."


@register("mine.reply", context_factory=standard_context)
class ReplyStage(BaseActionStage):
    action = Reply


@register("mine.count", context_factory=standard_context)
class Count(BaseAgentLoop):
    def create_initial_state(self, *, input):
        return 0

    def advance_state(self, *, state, iteration):
        return state + 1

    def is_complete(self, *, state, iteration):
        return state >= 2

    def build_result(self, *, state):
        return state
"""


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("agentloop runnables --json", '"mine.count"'),
        ("agentloop graph mine.count --json", '"Count"'),
        ("agentloop tools sync --json", '"mine_reply"'),
    ],
)
def test_a_command_finds_the_module_in_its_working_folder(tmp_path: Path, command: str, says: str) -> None:
    (tmp_path / "mine.py").write_text(MINE, encoding="utf-8")

    done = typed(tmp_path, f"AGENTLOOP_IMPORTS=mine {command}")

    assert done.returncode == 0, done.stdout + done.stderr
    json.loads(done.stdout)
    assert says in done.stdout


def test_a_module_the_folder_lacks_is_still_a_clear_error(tmp_path: Path) -> None:
    done = typed(tmp_path, "AGENTLOOP_IMPORTS=mine agentloop runnables")

    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: AGENTLOOP_IMPORTS names 'mine', which cannot be imported: No module named 'mine'"
    )


def test_a_command_run_in_process_leaves_the_path_as_it_found_it(home: Path) -> None:
    (home / "mine.py").write_text(MINE, encoding="utf-8")
    before = list(sys.path)
    sys.modules.pop("mine", None)
    try:
        done = CliRunner().invoke(app, ["runnables", "--json"], env={"AGENTLOOP_IMPORTS": "mine"})
    finally:
        sys.modules.pop("mine", None)

    assert done.exit_code == 0, done.output
    assert "mine.count" in done.output
    assert sys.path == before

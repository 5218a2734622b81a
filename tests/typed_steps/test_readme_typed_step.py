"""The tutorial's "A typed step, end to end" (``docs/tutorial.md``, once in the README), run as a new
user would: its module and its tests written to a fresh folder, the tests run by pytest with the
kit's plugin, then its commands run by the ``agentloop`` command on the embedded defaults (no server,
no key: the offline model answers).

The code is read from the page, so the section and this test cannot drift apart.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.newcomer import a_users_environment, typed, typed_one_by_one

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "tutorial.md"
SECTION = "## A typed step, end to end"


def section_blocks() -> list[tuple[str, str]]:
    """``(language, code)`` of each fenced block of the section, in order."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```(\w+)\n(.*?)```", text[start:end], re.DOTALL)


def files_of_the_section() -> dict[str, str]:
    """The section's python and ini blocks by the file name their first line gives (``# trips.py``)."""
    files = {}
    for language, code in section_blocks():
        first = code.splitlines()[0]
        if (language, Path(first).suffix) in (("python", ".py"), ("ini", ".ini")) and first.startswith("# "):
            files[first[2:]] = code
    return files


def commands_of_the_section() -> list[str]:
    (shell,) = [code for language, code in section_blocks() if language == "sh"]
    return [line for line in shell.splitlines() if line.strip()]


@pytest.fixture
def user_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh folder holding the section's files, and a new user's environment for it."""
    for name, code in files_of_the_section().items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    return tmp_path, a_users_environment(tmp_path)


def test_the_section_has_a_module_its_tests_and_its_commands() -> None:
    assert sorted(files_of_the_section()) == ["conftest.py", "pytest.ini", "test_trips.py", "trips.py"]
    assert any("agentloop tools sync" in command for command in commands_of_the_section())


def test_the_sections_tests_pass_with_the_kits_plugin(user_folder: tuple[Path, dict[str, str]]) -> None:
    folder, env = user_folder

    # the kit's plugin comes from the page's conftest.py and the mode from its pytest.ini, as a
    # user's would: the command as the page gives it
    result = typed(folder, "pytest -q -p no:cacheprovider test_trips.py", env)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_the_sections_commands_run_the_step_before_any_sync_then_sync_the_schema(
    user_folder: tuple[Path, dict[str, str]],
) -> None:
    folder, env = user_folder

    # typed as the page gives them, in the folder of trips.py, with no PYTHONPATH
    (_, triggered), (_, synced) = typed_one_by_one(folder, "\n".join(commands_of_the_section()), env)

    assert triggered.returncode == 0, triggered.stdout + triggered.stderr  # no sync needed first
    assert '"city"' in triggered.stdout and "degraded" not in triggered.stdout + triggered.stderr
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert "plan_trip" in synced.stdout and "created" in synced.stdout
    [export] = [line for line in commands_of_the_section() if line.startswith("export ")]
    again = typed(
        folder, f"""{export}\nagentloop trigger trips.plan --input '{{"wish": "Rome"}}' --wait --json""", env
    )
    answer = json.loads(again.stdout)
    assert answer["status"] == "succeeded", again.stderr
    plan = answer["result"]
    assert set(plan) == {"city", "nights", "transport"} and 1 <= plan["nights"] <= 14

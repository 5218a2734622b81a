"""A loop stopped by its ``max_iterations`` bound says so in every machine-readable output: the run
record (``runs show --json``), ``trigger --wait --json`` and the evaluation's cases (inline and on
Celery), where a case may expect it (``"stopped_by": "bound"``) or refuse it (``"complete"``).
Typed in a new user's shell in the folder of the tutorial's ``counting.py`` (embedded defaults)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.docs.docs_pages import section
from tests.newcomer import typed


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    [module] = [
        b for b in section("docs/tutorial.md", "## A composite: fan out, merge") if b.language == "python"
    ][:1]
    assert module.code.startswith("# counting.py")  # CountTo: max_iterations = 10
    (tmp_path / "counting.py").write_text(module.code + "\n", encoding="utf-8")
    return tmp_path


def test_trigger_and_the_run_record_say_a_loop_stopped_at_its_bound(folder: Path) -> None:
    bounded = typed(
        folder, "AGENTLOOP_IMPORTS=counting agentloop trigger counting.count_to --input 30 --wait --json"
    )
    complete = typed(
        folder, "AGENTLOOP_IMPORTS=counting agentloop trigger counting.count_to --input 3 --wait --json"
    )

    answers = [json.loads(done.stdout) for done in (bounded, complete)]
    assert [(a["status"], a["result"], a["stopped_by"]) for a in answers] == [
        ("succeeded", 10, "bound"),
        ("succeeded", 3, "complete"),
    ]
    for answer in answers:
        shown = typed(folder, f"agentloop runs show {answer['run_id']} --json")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert json.loads(shown.stdout)["run"]["stopped_by"] == answer["stopped_by"]
    said = typed(folder, "AGENTLOOP_IMPORTS=counting agentloop trigger counting.count_to --input 30 --wait")
    assert "stopped by its bound" in said.stdout


@pytest.mark.parametrize("mode", ["", " --celery"])
def test_an_eval_case_expects_or_refuses_a_stop_at_the_bound(folder: Path, mode: str) -> None:
    cases = [
        {"id": "short", "input": 3, "expected": 3, "stopped_by": "complete"},
        {"id": "refused", "input": 30, "expected": 10, "stopped_by": "complete"},
        {"id": "expected", "input": 30, "expected": 10, "stopped_by": "bound"},
        {"id": "unsaid", "input": 30, "expected": 10},
    ]
    (folder / "cases.jsonl").write_text("".join(json.dumps(case) + "\n" for case in cases))

    done = typed(
        folder, f"AGENTLOOP_IMPORTS=counting agentloop eval counting.count_to cases.jsonl{mode} --json"
    )

    report = json.loads(done.stdout)
    verdicts = {case["id"]: (case["passed"], case["stopped_by"]) for case in report["cases"]}
    assert verdicts == {
        "short": (True, "complete"),
        "refused": (False, "bound"),
        "expected": (True, "bound"),
        "unsaid": (True, "bound"),  # no expectation: it passes, and says how it stopped
    }
    assert done.returncode == 0, done.stderr  # a failing case is a finding, not the command's failure
    table = typed(folder, "AGENTLOOP_IMPORTS=counting agentloop eval counting.count_to cases.jsonl")
    assert "(expected stopped_by complete)" in table.stdout and "(bound)" in table.stdout


def test_a_case_with_another_stopped_by_is_an_error_naming_its_line(folder: Path) -> None:
    (folder / "cases.jsonl").write_text('{"input": 3, "stopped_by": "done"}\n')

    done = typed(folder, "AGENTLOOP_IMPORTS=counting agentloop eval counting.count_to cases.jsonl")

    assert done.returncode == 2
    assert 'line 1: "stopped_by" must be "complete" or "bound", not \'done\'' in done.stderr

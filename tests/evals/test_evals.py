"""``agentloop eval``: a registered runnable over a dataset, scored, kept, compared.

The runnables are ``tests/workflows/eval.py``'s, run in-process and (one test) on Celery as a batch
on the embedded defaults. The model-judged scorer is tested in ``test_eval_judge.py``, the HTML
page in a browser in ``test_eval_page.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from eval_support import invoke, kept, write_dataset

from agentloop.orchestration.errors import EvaluationInputError, WorkflowFailedError
from agentloop.orchestration.evals.compare import compare_reports
from agentloop.orchestration.evals.dataset import parse_dataset
from agentloop.orchestration.evals.report import CaseResult, EvalReport
from agentloop.orchestration.evals.running import run_on_celery
from agentloop.orchestration.evals.verdicts import EvalScore, as_score
from agentloop.orchestration.evals.version import source_digest
from agentloop.orchestration.store import InMemoryRunStore, open_store

SHOUTS = [
    {"id": "hi", "input": "hi", "expected": "HI"},
    {"id": "yo", "input": "yo", "expected": "YO"},
    {"id": "boom", "input": "boom", "expected": "BOOM"},
]


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = invoke("eval", *args, "--json")
    return result.exit_code, json.loads(result.stdout)


# ----- datasets --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"input": 1}\n{"input": 2', "dataset line 2 is not valid JSON"),
        ('{"input": 1}\n\n[1, 2]', "dataset line 3 must be a JSON object"),
        ('{"expected": 1}', 'dataset line 1 has no "input"'),
        ('{"input": 1, "expect": 1}', "dataset line 1 has unknown keys ['expect']"),
        ('{"id": "a", "input": 1}\n{"id": "a", "input": 2}', "line 2: id 'a' is also the id of line 1"),
        ('{"id": true, "input": 1}', 'dataset line 1: "id" must be a non-empty string or an integer'),
        ("\n  \n", "dataset holds no case"),
    ],
)
def test_a_bad_dataset_line_is_an_error_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(EvaluationInputError) as raised:
        parse_dataset(text)

    assert message in str(raised.value)


def test_a_case_s_id_defaults_to_its_line_and_expected_null_is_an_expectation() -> None:
    cases = parse_dataset('{"input": "a"}\n\n{"input": "b", "expected": null, "id": 7}\n')

    assert [(case.id, case.has_expected, case.expected) for case in cases] == [
        ("1", False, None),
        ("7", True, None),
    ]


def test_the_cli_names_the_bad_line_without_a_traceback(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", [{"input": "a"}, '{"input": "b",'])

    result = invoke("eval", "evals.shout", "cases.jsonl")

    assert result.exit_code == 2
    assert "cases.jsonl line 2 is not valid JSON" in result.output
    assert "Traceback" not in result.output


def test_a_missing_dataset_or_runnable_or_imports_is_a_usage_error(
    eval_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dataset(eval_home / "cases.jsonl", SHOUTS)

    missing = invoke("eval", "evals.shout", "nope.jsonl")
    unknown = invoke("eval", "no.such", "cases.jsonl")
    monkeypatch.delenv("AGENTLOOP_IMPORTS")
    unimported = invoke("eval", "evals.shout", "cases.jsonl")

    assert (missing.exit_code, unknown.exit_code, unimported.exit_code) == (2, 2, 2)
    assert "cannot read the dataset 'nope.jsonl'" in missing.output
    assert "unknown runnable 'no.such'" in unknown.output and "evals.shout" in unknown.output
    assert "AGENTLOOP_IMPORTS names no module" in unimported.output


# ----- running and scoring in-process ----------------------------------------------------------------


def test_exact_match_scores_each_case_prints_a_table_and_keeps_the_evaluation(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", SHOUTS)

    result = invoke("eval", "evals.shout", "cases.jsonl")

    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") > 4}
    assert "pass" in rows["hi"] and "pass" in rows["yo"]
    assert "failed" in rows["boom"] and "FAIL" in rows["boom"]
    assert "passed 2 of 3 (67%)" in result.output
    assert "runs: 1 failed, 2 succeeded" in result.output
    [report] = kept(eval_home)
    assert report["runnable"] == "evals.shout" and report["mode"] == "inline"
    assert report["scorers"] == ["exact"]
    assert report["aggregate"]["passed"] == 2 and report["aggregate"]["scorers"]["exact"]["mean"] == 0.6667
    boom = report["cases"][2]
    assert boom["status"] == "failed" and boom["passed"] is False
    assert boom["error"] == {"type": "ValueError", "message": "boom went the case"}
    assert boom["scores"]["exact"]["reason"] == "the run failed: ValueError: boom went the case"
    assert f"kept as {report['id']}" in result.output


def test_the_report_keeps_the_code_version_and_the_model(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", SHOUTS[:1])

    code, report = run_json("evals.shout", "cases.jsonl")

    assert code == 0
    package = Path(__file__).resolve().parents[1] / "workflows"  # the top-level package of the runnables
    sources = sorted(package.glob("*.py"))
    assert report["code"]["source_root"] == "workflows" and report["code"]["source_files"] == len(sources)
    import hashlib

    digest = hashlib.sha256(
        b"".join(source.name.encode() + b"\0" + source.read_bytes() + b"\0" for source in sources)
    ).hexdigest()
    assert report["code"]["source_sha256"] == digest
    assert report["code"]["agentloop"] == "0.1.0"
    assert report["code"]["git"]  # the tests run in the project's repository
    assert report["model"]["from"] == "settings" and report["model"]["description"].startswith("offline")
    assert report["dataset"]["sha256"] == hashlib.sha256((eval_home / "cases.jsonl").read_bytes()).hexdigest()


def test_a_degraded_run_never_passes_even_when_its_fallback_matches(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", [{"input": "hi", "expected": "HI"}])

    code, report = run_json("evals.degraded", "cases.jsonl")

    [case] = report["cases"]
    assert code == 0
    assert case["status"] == "degraded" and case["output"] == "HI"
    assert case["scores"]["exact"]["passed"] is True  # the output matched ...
    assert case["passed"] is False  # ... from a fallback: the case fails
    assert case["error"]["failures"][0]["reason"] == "the model was away"


def test_a_type_scorer_validates_each_output_and_says_what_is_wrong(eval_home: Path) -> None:
    write_dataset(
        eval_home / "people.jsonl",
        [
            {"id": "ok", "input": {"name": "Ada", "age": 36}},
            {"id": "bad", "input": {"name": "Bob", "age": "x"}},
        ],
    )

    code, report = run_json("evals.profile", "people.jsonl", "--scorer", "type:workflows.eval:Profile")

    ok, bad = report["cases"]
    assert code == 0
    assert ok["passed"] is True
    assert bad["passed"] is False and "age" in bad["scores"]["type:workflows.eval:Profile"]["reason"]


def test_user_functions_score_with_the_keywords_they_declare(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", [{"id": "a", "input": "hello", "expected": "HELLO!"}])

    code, report = run_json(
        "evals.shout",
        "cases.jsonl",
        "-s",
        "workflows.eval:length_ratio",
        "-s",
        "workflows.eval:starts_right",
        "-s",
        "workflows.eval:polite",
        "--threshold",
        "0.9",
    )

    scores = report["cases"][0]["scores"]
    assert code == 0
    assert scores["workflows.eval:length_ratio"] == {
        "value": 5 / 6,
        "passed": False,  # under --threshold 0.9
        "reason": "",
        "error": False,
    }
    assert scores["workflows.eval:starts_right"]["passed"] is True
    assert scores["workflows.eval:polite"] == {
        "value": 0.0,
        "passed": False,
        "reason": "shouted",
        "error": False,
    }
    assert report["aggregate"]["scorers"]["workflows.eval:polite"]["passed"] == 0


def test_a_scorer_that_raises_or_answers_out_of_range_fails_the_case_with_the_reason(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", [{"input": "a"}])

    code, report = run_json(
        "evals.shout",
        "cases.jsonl",
        "-s",
        "workflows.eval:broken_scorer",
        "-s",
        "workflows.eval:out_of_range",
    )

    scores = report["cases"][0]["scores"]
    assert code == 0 and report["cases"][0]["passed"] is False
    assert scores["workflows.eval:broken_scorer"]["error"] is True
    assert "RuntimeError: the scorer tripped" in scores["workflows.eval:broken_scorer"]["reason"]
    assert "a score is a number from 0 to 1, not 7.0" in scores["workflows.eval:out_of_range"]["reason"]
    assert report["aggregate"]["scorers"]["workflows.eval:broken_scorer"]["errors"] == 1


@pytest.mark.parametrize(
    ("scorer", "message"),
    [
        ("workflows.eval:Profile", "names a type: write type:workflows.eval:Profile"),
        ("workflows.eval:needs_more", "takes ['rubric']"),
        ("no_such_module:f", "cannot import 'no_such_module'"),
        ("workflows.eval:nothing", "'workflows.eval' has no 'nothing'"),
        ("exactly", "write exact, judge, type:MODULE:TYPE or MODULE:FUNCTION"),
        ("judge", "--scorer judge needs a model"),
    ],
)
def test_a_scorer_that_cannot_be_used_is_a_usage_error(eval_home: Path, scorer: str, message: str) -> None:
    write_dataset(eval_home / "cases.jsonl", SHOUTS)

    result = invoke("eval", "evals.shout", "cases.jsonl", "--scorer", scorer)

    assert result.exit_code == 2 and message in result.output
    assert kept(eval_home) == []  # nothing ran


def test_without_a_scorer_every_case_needs_an_expected(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", [{"id": "x", "input": "a"}])

    result = invoke("eval", "evals.shout", "cases.jsonl")

    assert result.exit_code == 2 and "cases ['x'] have no \"expected\": give --scorer" in result.output


def test_fail_under_exits_1_below_the_pass_rate(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", SHOUTS)

    assert invoke("eval", "evals.shout", "cases.jsonl", "--fail-under", "0.6").exit_code == 0
    below = invoke("eval", "evals.shout", "cases.jsonl", "--fail-under", "0.7")
    assert below.exit_code == 1 and "pass rate 67% is under --fail-under 70%" in below.output


def test_a_run_s_error_keeps_no_value_of_the_context_spec(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", [{"input": "a"}])

    code, report = run_json(
        "evals.leaky",
        "cases.jsonl",
        "-s",
        "workflows.eval:polite",
        "-c",
        '{"token": "s3cr3t-t0ken"}',
    )

    assert code == 0
    assert report["cases"][0]["error"] == {
        "type": "PermissionError",
        "message": "the service refused token <hidden>",
    }
    assert not any(
        "s3cr3t" in path.read_text() for path in (eval_home / ".agentloop" / "evals").glob("*.json")
    )


# ----- on Celery ---------------------------------------------------------------------------------------


class StubApp:
    """What :func:`run_on_celery` uses of a Celery app: ``send_task`` and the batch's ``AsyncResult``."""

    def __init__(self, *, failure: BaseException | None = None) -> None:
        self.failure = failure
        self.sent: list[tuple[str, dict[str, Any], str]] = []

    def send_task(self, name: str, *, kwargs: dict[str, Any], task_id: str) -> None:
        self.sent.append((name, kwargs, task_id))

    def AsyncResult(self, task_id: str) -> Any:  # Celery's name
        failure = self.failure
        return SimpleNamespace(failed=lambda: failure is not None, result=failure)


def test_a_batch_that_fails_before_its_runs_is_a_workflow_failure() -> None:
    app = StubApp(failure=LookupError("unknown runnable 'evals.shout'"))
    cases = parse_dataset('{"input": "a"}')

    with pytest.raises(WorkflowFailedError) as raised:
        run_on_celery(
            app, InMemoryRunStore(), "evals.shout", cases, spec={}, batch_id="b1", timeout=None, poll=0
        )

    assert (raised.value.run_id, raised.value.error_type) == ("b1", "LookupError")
    [(name, kwargs, task_id)] = app.sent
    assert (name, task_id, kwargs["inputs"], kwargs["key"]) == ("agentloop.batch", "b1", ["a"], "eval:b1")


def test_runs_not_ended_at_the_timeout_are_kept_unfinished_and_ended_ones_as_they_ended() -> None:
    store = InMemoryRunStore()
    store.create_run(run_id="b2", runnable="batch:eval:b2", input={})
    for index in range(2):
        store.create_run(run_id=f"b2-{index}", runnable="evals.shout", input="a", parent_run_id="b2")
    store.mark_running("b2-0")
    store.finish_run("b2-0", status="succeeded", output="A")
    cases = parse_dataset('{"input": "a"}\n{"input": "a"}')

    runs = run_on_celery(StubApp(), store, "evals.shout", cases, spec={}, batch_id="b2", timeout=0, poll=0)

    assert [(run.status, run.output, run.run_id) for run in runs] == [
        ("succeeded", "A", "b2-0"),
        ("unfinished", None, "b2-1"),
    ]


def test_on_celery_the_cases_run_as_one_batch_and_score_as_in_process(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", SHOUTS)

    code, on_celery = run_json("evals.shout", "cases.jsonl", "--celery")
    _, inline = run_json("evals.shout", "cases.jsonl")

    assert code == 0 and on_celery["mode"] == "celery"

    def outcome(report: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(c["id"], c["status"], c["output"], c["passed"]) for c in report["cases"]]

    assert outcome(on_celery) == outcome(inline)
    store, _ = open_store(f"sqlite:///{eval_home / '.agentloop' / 'agentloop.sqlite3'}")
    batch = store.get_run(on_celery["id"])
    assert batch is not None and batch.runnable == f"batch:eval:{on_celery['id']}"
    children = {record.id: record for record in store.list_runs(parent_run_id=on_celery["id"])}
    assert [case["run_id"] for case in on_celery["cases"]] == [f"{on_celery['id']}-{i}" for i in range(3)]
    assert {run_id: record.status for run_id, record in children.items()} == {
        f"{on_celery['id']}-0": "succeeded",
        f"{on_celery['id']}-1": "succeeded",
        f"{on_celery['id']}-2": "failed",
    }
    store.engine.dispose()


def test_eval_run_is_the_default_command_and_every_command_has_help(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", SHOUTS[:1])

    _, explicit = run_json("run", "evals.shout", "cases.jsonl")

    assert explicit["runnable"] == "evals.shout" and explicit["aggregate"]["passed"] == 1
    for command in ([], ["run"], ["compare"], ["list"], ["show"]):
        helped = invoke("eval", *command, "--help")
        assert helped.exit_code == 0 and "Usage: agentloop eval" in helped.output


def test_the_source_hash_follows_linked_folders_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "linked_app"
    (package / "steps").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "steps" / "prompt.py").write_text("PROMPT = 'one'\n")
    (package / "steps" / "again").symlink_to(package / "steps")  # a cycle
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("linked_app")

    first = source_digest("linked_app.workflows")
    (package / "steps" / "prompt.py").write_text("PROMPT = 'two'\n")
    second = source_digest("linked_app.workflows")

    assert first["source_files"] == second["source_files"] == 2
    assert first["source_sha256"] != second["source_sha256"]  # a prompt edited in a helper module


def test_timeout_needs_celery(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", SHOUTS)

    result = invoke("eval", "evals.shout", "cases.jsonl", "--timeout", "5")

    assert result.exit_code == 2 and "--timeout needs --celery" in result.output


# ----- comparing -----------------------------------------------------------------------------------------


def test_compare_lists_regressions_first_and_exits_1_on_one(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", [*SHOUTS, {"id": "same", "input": "1", "expected": "1"}])
    _, before = run_json("evals.shout", "cases.jsonl")
    _, after = run_json("evals.shout", "cases.jsonl", "--context", '{"whisper": true}')

    worse = invoke("eval", "compare", before["id"], after["id"])
    better = invoke("eval", "compare", after["id"][:-2] + after["id"][-2:], before["id"])
    as_json = invoke("eval", "compare", before["id"], after["id"], "--json")

    assert worse.exit_code == 1
    assert "2 regressed: hi, yo" in worse.output
    changed = [line for line in worse.output.splitlines() if "regressed" in line or "fixed" in line]
    assert [line.split("│")[1].strip() for line in changed[:2]] == ["hi", "yo"]
    assert better.exit_code == 0 and "2 fixed" in better.output
    comparison = json.loads(as_json.stdout)
    assert as_json.exit_code == 1
    assert comparison["counts"]["regressed"] == 2 and comparison["counts"]["same"] == 2
    assert comparison["changes"][0] == {
        "id": "hi",
        "kind": "regressed",
        "before": {"passed": True, "status": "succeeded", "output": "HI"},
        "after": {"passed": False, "status": "succeeded", "output": "hi"},
        "scores": {"exact": {"before": 1.0, "after": 0.0, "delta": -1.0}},
        "delta": -1.0,
    }


def test_compare_takes_report_files_and_a_unique_id_prefix(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", SHOUTS)
    _, first = run_json("evals.shout", "cases.jsonl", "--write-json", "first.json")

    by_file = invoke("eval", "compare", "first.json", first["id"])
    unknown = invoke("eval", "compare", "eval-nope", first["id"])
    not_a_report = invoke("eval", "compare", "cases.jsonl", first["id"])

    assert by_file.exit_code == 0 and "3 same" in by_file.output
    assert unknown.exit_code == 2 and "no evaluation 'eval-nope'" in unknown.output
    assert not_a_report.exit_code == 2 and "is not an evaluation report" in not_a_report.output


def _case(case_id: str, passed: bool, value: float) -> CaseResult:
    return CaseResult(
        id=case_id,
        input=case_id,
        status="succeeded",
        scores={"s": EvalScore(value=value, passed=passed)},
    )


def _report(report_id: str, *cases: CaseResult) -> EvalReport:
    return EvalReport(
        id=report_id,
        runnable="r",
        dataset={"path": "d.jsonl", "sha256": "0"},
        mode="inline",
        created_at="2026-01-01T00:00:00+00:00",
        duration_seconds=1.0,
        code={},
        model={},
        scorers=("s",),
        threshold=0.5,
        cases=cases,
    )


def test_changes_are_ordered_regressions_then_worse_then_fixed_better_added_removed_same() -> None:
    before = _report(
        "a",
        _case("same", True, 1.0),
        _case("small-drop", True, 0.9),
        _case("regressed-a-little", True, 0.6),
        _case("big-drop", True, 0.8),
        _case("regressed-a-lot", True, 1.0),
        _case("fixed", False, 0.1),
        _case("removed", True, 1.0),
        _case("better", False, 0.1),
    )
    after = _report(
        "b",
        _case("same", True, 1.0),
        _case("small-drop", True, 0.8),
        _case("regressed-a-little", False, 0.4),
        _case("big-drop", True, 0.5),
        _case("regressed-a-lot", False, 0.0),
        _case("fixed", True, 0.9),
        _case("better", False, 0.3),
        _case("added", True, 1.0),
    )

    comparison = compare_reports(before, after)

    assert [(change.id, change.kind) for change in comparison.changes] == [
        ("regressed-a-lot", "regressed"),
        ("regressed-a-little", "regressed"),
        ("big-drop", "worse"),
        ("small-drop", "worse"),
        ("fixed", "fixed"),
        ("better", "better"),
        ("added", "added"),
        ("removed", "removed"),
        ("same", "same"),
    ]


# ----- values -----------------------------------------------------------------------------------------------


def test_a_report_round_trips_through_json() -> None:
    report = _report(
        "r1",
        CaseResult(
            id="x",
            input={"q": [1, 2]},
            expected=None,
            has_expected=True,
            status="failed",
            error={"type": "E", "message": "m"},
            run_id="r1-0",
            input_tokens=3,
            output_tokens=4,
            scores={"s": EvalScore.failed("why")},
        ),
        _case("y", True, 0.75),
    )

    again = EvalReport.from_dict(json.loads(json.dumps(report.to_dict())))

    assert again == report
    assert again.to_dict() == report.to_dict()


@pytest.mark.parametrize(
    ("answer", "score"),
    [
        (True, EvalScore(value=1.0, passed=True)),
        (0, EvalScore(value=0.0, passed=False)),
        (0.5, EvalScore(value=0.5, passed=True)),
        ({"score": 0.2, "reason": "meh"}, EvalScore(value=0.2, passed=False, reason="meh")),
        ({"score": 0.2, "passed": True}, EvalScore(value=0.2, passed=True)),
    ],
)
def test_a_scorer_s_plain_answer_becomes_a_score(answer: Any, score: EvalScore) -> None:
    assert as_score(answer) == score


@pytest.mark.parametrize("answer", [float("nan"), -0.1, 1.5, "yes", None, {"reason": "no score"}])
def test_anything_else_a_scorer_answers_is_refused(answer: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        as_score(answer)

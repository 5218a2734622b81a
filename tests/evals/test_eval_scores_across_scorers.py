"""Two scorers over cases that not every scorer scored, and a case that moved both ways: a
scorer's mean is over the cases it scored; a case worse on one scorer and better on another
is ``worse`` (a drop is never hidden behind a rise elsewhere)."""

from __future__ import annotations

from agentloop.orchestration.evals.compare import compare_reports
from agentloop.orchestration.evals.report import CaseResult, EvalReport
from agentloop.orchestration.evals.verdicts import EvalScore


def case(case_id: str, **values: float) -> CaseResult:
    scores = {name: EvalScore(value=value, passed=value >= 0.5) for name, value in values.items()}
    return CaseResult(id=case_id, input=case_id, status="succeeded", scores=scores)


def report(report_id: str, *cases: CaseResult) -> EvalReport:
    return EvalReport(
        id=report_id,
        runnable="r",
        dataset={"path": "d.jsonl", "sha256": "0"},
        mode="inline",
        created_at="2026-01-01T00:00:00+00:00",
        duration_seconds=1.0,
        code={},
        model={},
        scorers=("exact", "judge"),
        threshold=0.5,
        cases=cases,
    )


def test_a_scorers_mean_counts_only_the_cases_it_scored() -> None:
    # the judge scored the first case only (it was not asked about the second)
    scored = report("a", case("one", exact=1.0, judge=1.0), case("two", exact=0.5))

    scorers = scored.aggregate()["scorers"]

    assert scorers["exact"]["mean"] == 0.75
    assert scorers["judge"]["mean"] == 1.0  # over one case, not 0.5 over two
    assert scorers["judge"]["passed"] == 1
    assert report("b", case("one", exact=1.0)).aggregate()["scorers"]["judge"]["mean"] is None


def test_a_case_worse_on_one_scorer_and_better_on_another_is_worse_never_better() -> None:
    before = report("a", case("mixed", exact=0.9, judge=0.5), case("up", exact=0.5, judge=0.5))
    after = report("b", case("mixed", exact=0.6, judge=0.9), case("up", exact=0.5, judge=0.7))

    changes = {change.id: change for change in compare_reports(before, after).changes}

    assert changes["mixed"].delta > 0  # its rise outweighs its drop, and still:
    assert changes["mixed"].kind == "worse"
    assert changes["up"].kind == "better"
    assert compare_reports(before, after).counts()["worse"] == 1

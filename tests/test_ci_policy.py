"""The CI policy (``tests/ci_policy.py``): a skip under ``CI=true`` is a failure naming its reason."""

from __future__ import annotations

import pytest

SKIPPING = """
import pytest

def test_needs_a_server():
    pytest.skip("no redis-server on PATH")

@pytest.mark.skipif(True, reason="tool missing")
def test_marked():
    pass

@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    assert False

def test_plain():
    assert True
"""


def test_under_ci_a_skip_fails_with_its_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(SKIPPING)
    result = pytester.runpytest("-p", "ci_policy", "-rN")  # reasons read in full, not from the summary
    result.assert_outcomes(passed=1, failed=1, errors=1, xfailed=1)  # a skip mark fails at setup
    result.stdout.fnmatch_lines(["*skipped under CI=true*no redis-server on PATH*"])
    result.stdout.fnmatch_lines(["*skipped under CI=true*tool missing*"])


def test_outside_ci_a_skip_stays_a_skip(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(SKIPPING)
    pytester.runpytest("-p", "ci_policy").assert_outcomes(passed=1, skipped=2, xfailed=1)

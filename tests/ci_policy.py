"""Under ``CI=true`` no test is skipped: a skip is turned into a failure that says why.

CI is where every test must run. A test that cannot (a server missing, an optional tool not
installed) fails there with its skip reason, so the missing install shows up in ``.ci/run``'s
output instead of hiding in a count of skips. Elsewhere skips stay skips, with their reason.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tests.services import on_ci


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and on_ci()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true, where every test must run: {reason}"

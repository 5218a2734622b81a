"""The fault suite's fast part, inside the test suite: every scenario but the minute-long database
outage, small, on one rig (a real prefork worker, a private Redis and PostgreSQL database, the
OpenAI-protocol server). No run may be lost or stuck, and each scenario's runs end as issue 10
asks (``python -m tests.faults`` runs the full version and prints the table)."""

from __future__ import annotations

import pytest

from .rig import FaultRig
from .suite import Scenario, run_scenario, select
from .workload import QUICK

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("scenario", select(QUICK), ids=lambda s: s.name.replace(": ", "-").replace(" ", "_"))
def test_no_run_is_lost_or_stuck_and_each_ends_as_it_should_when(
    fault_rig: FaultRig, scenario: Scenario
) -> None:
    result = run_scenario(fault_rig, scenario, QUICK)
    print(result.summary_line())
    assert result.passed, "\n".join([result.summary_line(), *result.problems])

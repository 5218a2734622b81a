"""The guarantee matrix's CI cells (:mod:`.matrix` says which and why), on one rig: a real prefork
worker, a private Redis and PostgreSQL database, the OpenAI-protocol server. A cell that meets a
defect of issue 33 still being fixed is ``xfail(strict=True)``: it fails loudly once the fix
lands (the mark goes with the merge), and when it breaks another way than that defect's.
``python -m tests.faults matrix`` runs every cell."""

from __future__ import annotations

import pytest

from .invariants import summary
from .matrix import Cell, run_cell, select
from .rig import FaultRig

pytestmark = pytest.mark.integration


def _param(cell: Cell) -> object:
    reason = f"issue 33 item {cell.issue}: {cell.breaks}"
    marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)] if cell.issue else []
    return pytest.param(cell, id=cell.name, marks=marks)


@pytest.mark.parametrize("cell", [_param(cell) for cell in select("redis", quick=True)])
def test_every_guarantee_holds_on_the_cell(fault_rig: FaultRig, cell: Cell) -> None:
    result = run_cell(fault_rig, cell)
    fault_rig.recover()
    if cell.issue and result.violations and all(v.invariant != cell.breaks for v in result.violations):
        # not an AssertionError: the xfail mark expects that one, for the known defect only
        raise RuntimeError(f"{cell.name} broke, but not as item {cell.issue}:\n{summary(result.violations)}")
    assert result.held, f"{cell.name}:\n{summary(result.violations, 10)}"

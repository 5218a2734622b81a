"""``trigger --wait`` at 80 columns (the CLI's real output): the bar keeps the runnable's name
whole, and the last event (the step, its phase, the reason) goes on the lines below it,
wrapped at words: nothing is cut with an ellipsis."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import invoke


def test_the_progress_line_keeps_the_runnable_and_the_reason_whole(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.eval")

    result = invoke("trigger", "evals.degraded", "--input", '"hi"', "--wait")

    lines = result.output.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines) and "…" not in result.output, result.output
    (bar,) = [line for line in lines if "1/1" in line]
    assert "evals.degraded" in bar.split()
    words = " ".join(result.output[result.output.index(bar) + len(bar) :].split())
    assert "shout_with_fallback (root) degraded: completed degraded: 1 model call(s) failed" in words
    assert "for shout_with_fallback at (root): the model was away" in words  # the reason, whole

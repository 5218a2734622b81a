"""A run that fails on embedded defaults (the in-memory broker, a worker thread in the command)
says so in one ``error:`` line: no Celery ``ERROR/MainProcess ... raised unexpected`` line and no
traceback before it (issue 34, item 7). The command is typed as a reader types it."""

from __future__ import annotations

from pathlib import Path

from tests.newcomer import typed

FAILING = """
from agentloop import BaseAgentLoop, register


@register("failing.boom")
class Boom(BaseAgentLoop):
    max_iterations = 2

    def create_initial_state(self, *, input):
        return 0

    def advance_state(self, *, state, iteration):
        raise ValueError("it broke")

    def is_complete(self, *, state, iteration):
        return False

    def build_result(self, *, state):
        return state
"""


def test_a_failing_run_on_embedded_defaults_prints_one_error_line_and_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "failing.py").write_text(FAILING)

    done = typed(tmp_path, "AGENTLOOP_IMPORTS=failing agentloop trigger failing.boom --input 1 --wait")

    assert done.returncode == 1, done.stdout + done.stderr
    assert "raised unexpected" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].endswith("failed: ValueError: it broke"), done.stderr

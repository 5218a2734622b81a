"""``agentloop resume``: a paused run's question shown, a wrong answer refused (exit 1), the right
one accepted (exit 0) and the run finished."""

from __future__ import annotations

import json

import pytest
from human_support import start, wait_for_status
from typer.testing import CliRunner

from agentloop.orchestration.cli import app as cli


def test_the_command_shows_refuses_and_answers(human_worker, monkeypatch: pytest.MonkeyPatch) -> None:
    rig = human_worker
    for name, value in rig.env.items():
        monkeypatch.setenv(name, value)
    handle = start(rig.app, rig.store, "human.typed", 1)
    wait_for_status(rig.store, handle.run_id, "waiting")
    runner = CliRunner()

    shown = runner.invoke(cli, ["resume", handle.run_id, "--json"])
    assert shown.exit_code == 0, shown.output
    [wait] = json.loads(shown.stdout)
    assert (wait["question"]["prompt"], wait["answer_schema"]["required"]) == ("how many?", ["count"])

    wrong = runner.invoke(cli, ["resume", handle.run_id, "--answer", '{"count": -1}'])
    assert wrong.exit_code == 1 and "refused" in wrong.output
    assert rig.store.get_run(handle.run_id).status == "waiting"

    right = runner.invoke(cli, ["resume", handle.run_id, "--answer", '{"count": 2}'])
    assert right.exit_code == 0, right.output
    assert handle.wait_sync(timeout=30)["steps"][1] == "approved={'count': 2}"
    assert runner.invoke(cli, ["resume", handle.run_id, "--answer", '{"count": 2}']).exit_code == 1

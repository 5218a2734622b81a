"""``agentloop resume``: a paused run's question shown, a wrong answer refused (exit 1), the right
one accepted (exit 0, its two statuses alike) and the run finished; no such run is exit 2; with no
worker answering, the answer is queued (exit 0)."""

from __future__ import annotations

import json

import pytest
from human_support import start, wait_for_status
from typer.testing import CliRunner

from agentloop.orchestration.cli import app as cli


def test_with_no_worker_answering_the_answer_is_queued(human_rig, monkeypatch: pytest.MonkeyPatch) -> None:
    # first in the module: no worker runs yet (human_worker keeps one for the module once started)
    for name, value in human_rig.env.items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()

    said = runner.invoke(cli, ["resume", "run-nobody-serves", "--answer", "true", "--timeout", "0.5"])
    as_json = runner.invoke(
        cli, ["resume", "run-nobody-serves", "--answer", "1", "--timeout", "0.5", "--json"]
    )

    assert said.exit_code == 0, said.output
    assert "answer queued" in said.stdout
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["queued"] is True


def test_an_answer_for_no_such_run_is_exit_2(human_worker, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in human_worker.env.items():
        monkeypatch.setenv(name, value)

    result = CliRunner().invoke(cli, ["resume", "run-that-never-was", "--answer", "true"])

    assert result.exit_code == 2, result.output
    assert "no such run run-that-never-was" in result.output


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

    right = runner.invoke(cli, ["resume", handle.run_id, "--answer", '{"count": 2}', "--json"])
    assert right.exit_code == 0, right.output
    accepted = json.loads(right.stdout)
    assert accepted["status"] == accepted["wait"]["status"] == "answered"
    assert handle.wait_sync(timeout=30)["steps"][1] == "approved={'count': 2}"
    assert runner.invoke(cli, ["resume", handle.run_id, "--answer", '{"count": 2}']).exit_code == 1

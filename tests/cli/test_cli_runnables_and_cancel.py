"""``agentloop runnables`` (what a message may name) and ``agentloop cancel`` (through the store,
or through the workers when only a broker knows the run)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_support import add_run, home_store, invoke


@pytest.fixture
def parity(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.parity")
    return home


def test_runnables_lists_kinds_stages_and_branch_runnables(parity: Path) -> None:
    listed = {entry["name"]: entry for entry in json.loads(invoke("runnables", "--json").stdout)}

    three = listed["parity.three_stages"]
    assert (three["kind"], three["derived"], three["class"]) == (
        "pipeline",
        False,
        "workflows.parity.ThreeStages",
    )
    assert three["stages"] == ["parity.count"] * 3 and three["branches"] == []
    fan = listed["parity.fan_of_pipelines"]
    assert fan["kind"] == "composite" and fan["branches"] == ["workflows.parity.PipelineBranch"]
    branch = listed["workflows.parity.PipelineBranch"]
    assert branch["derived"] and branch["stages"] == ["parity.count", "parity.count"]
    assert (listed["parity.count"]["kind"], listed["parity.count"]["max_iterations"]) == ("loop", 10)
    names = list(listed)
    assert names.index("parity.count") < names.index("workflows.parity.PipelineBranch")  # declared first


def test_runnables_table_shows_whole_names_at_80_columns(parity: Path) -> None:
    result = invoke("runnables")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for name in (
        "parity.three_stages",
        "parity.fan_of_pipelines",
        "workflows.parity.PipelineBranch",
    ):
        assert any(name in line for line in lines), name
    assert max(len(line) for line in lines) <= 80
    at = next(index for index, line in enumerate(lines) if "parity.three_stages" in line)
    # what it holds beside its name, or under it once a long entry has widened the name column
    assert "pipeline" in lines[at] and "stages: parity.count" in " ".join(lines[at : at + 2])


def test_runnables_keeps_every_column_at_80_columns_with_long_derived_names(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "agentloop.examples.record_search.workflows")

    result = invoke("runnables")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if "action stage" in line]
    assert len(rows) == 1 and "workflows.SummarizeAnswers " in rows[0]  # the kind whole beside the name
    assert "action stage*" in rows[0]
    assert any("actions: summarize_answers" in line for line in lines)  # what it holds, still shown
    assert any("up to 4 iterations" in line for line in lines)


def test_runnables_without_imports_says_why_the_table_is_empty(home: Path) -> None:
    result = invoke("runnables")

    assert result.exit_code == 0
    assert "AGENTLOOP_IMPORTS names no module" in result.stderr
    assert json.loads(invoke("runnables", "--json").stdout) == []


def test_cancel_asks_a_running_run_to_stop_through_the_store(home: Path) -> None:
    store = home_store(home)
    add_run(store, "run-to-stop")
    store.mark_running("run-to-stop")

    result = invoke("cancel", "run-to-stop", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "run_id": "run-to-stop",
        "cancel_requested": True,
        "via": "store",
        "status": "running",
    }
    assert store.is_cancel_requested("run-to-stop")
    assert "cancellation of run-to-stop requested" in invoke("cancel", "run-to-stop").stdout


def test_cancelling_a_run_that_ended_changes_nothing(home: Path) -> None:
    store = home_store(home)
    add_run(store, "done-run", status="succeeded")

    result = invoke("cancel", "done-run")

    assert result.exit_code == 0
    assert "already ended (succeeded): nothing to cancel" in result.stdout
    assert not store.is_cancel_requested("done-run")


def test_cancelling_an_unknown_run_without_a_broker_is_a_usage_error(home: Path) -> None:
    result = invoke("cancel", "no-such-run", "--json")

    assert result.exit_code == 2
    printed = json.loads(result.stdout)
    assert printed["exit_code"] == 2 and printed["error"].startswith("no run 'no-such-run' in the run store")
    assert invoke("cancel", "no-such-run").stdout == ""  # without --json, the error is on stderr


@pytest.mark.integration
def test_with_only_a_broker_the_workers_cancel_from_their_store(home: Path, redis_celery: Any) -> None:
    run_id = f"cli-cancel-{uuid.uuid4().hex[:8]}"
    add_run(redis_celery.store, run_id)  # the workers' store, not the CLI's
    env = {"REDIS_URL": redis_celery.broker_url}

    asked = invoke("cancel", run_id, "--json", env=env)
    unknown = invoke("cancel", "nobody-knows-this-run", "--timeout", "20", env=env)

    assert asked.exit_code == 0, asked.output
    assert json.loads(asked.stdout) == {
        "run_id": run_id,
        "cancel_requested": True,
        "via": "broker",
        "status": None,
    }
    assert redis_celery.store.is_cancel_requested(run_id)
    assert unknown.exit_code == 2 and "the workers' run store has no run" in unknown.stderr


@pytest.mark.integration
def test_with_a_broker_but_no_worker_cancel_times_out_with_3(home: Path, redis_celery: Any) -> None:
    env = {"REDIS_URL": redis_celery.broker_url, "AGENTLOOP_TASK_DEFAULT_QUEUE": "nobody-listens-here"}

    result = invoke("cancel", "some-run", "--timeout", "0.5", env=env)

    assert result.exit_code == 3
    assert "no worker answered within 0.5s" in result.stderr

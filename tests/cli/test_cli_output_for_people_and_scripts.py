"""Every command's ``--json`` output for scripts (errors too: JSON on stdout, non-zero exit), run ids
never cut at 80 columns, and options checked before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import add_run, home_store, invoke

SHORT = "0f3c2a9b8d7e6f5a4b3c2d1e0f9a8b7c"  # a generated id: 32 hex digits
LONG = "nightly-import-2031-12-24-of-the-eu-customer-records-run-0007"  # a caller's own id


@pytest.fixture
def two_runs(home: Path) -> list[str]:
    store = home_store(home)
    add_run(store, LONG, status="succeeded")
    add_run(store, SHORT)
    return [SHORT, LONG]


def test_runs_list_shows_every_id_whole_on_one_line_at_80_columns(two_runs: list[str]) -> None:
    result = invoke("runs", "list")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for run_id in two_runs:
        assert any(run_id in line for line in lines), (run_id, result.stdout)
    assert max(len(line) for line in lines) <= 80


def test_runs_list_wide_prints_every_column_whole(two_runs: list[str]) -> None:
    result = invoke("runs", "list", "--wide")

    assert result.exit_code == 0
    row = next(line for line in result.stdout.splitlines() if LONG in line)
    assert "parity.count" in row and "succeeded" in row and "0/0" in row
    assert len(row) > 80


def test_runs_list_json_is_every_record(two_runs: list[str]) -> None:
    result = invoke("runs", "list", "--json", "--limit", "5")

    listed = json.loads(result.stdout)
    assert [run["id"] for run in listed] == two_runs  # newest first
    assert listed[1]["status"] == "succeeded" and listed[1]["output"] == 3
    assert json.loads(invoke("runs", "list", "--json", "--status", "pending").stdout)[0]["id"] == SHORT


def test_runs_show_and_watch_in_json(two_runs: list[str]) -> None:
    shown = json.loads(invoke("runs", "show", LONG, "--json").stdout)
    watched = [json.loads(line) for line in invoke("runs", "watch", LONG, "--json").stdout.splitlines()]

    assert shown["run"]["id"] == LONG and shown["events"] == []
    assert watched == [{"run": shown["run"]}]
    missing = invoke("runs", "show", "nope", "--json")
    assert missing.exit_code == 2
    assert json.loads(missing.stdout) == {"error": "no run 'nope' in the run store", "exit_code": 2}


def test_runs_list_refuses_a_status_that_is_none(two_runs: list[str]) -> None:
    said = invoke("runs", "list", "--status", "bogus")
    as_json = invoke("runs", "list", "--status", "bogus", "--json")

    assert said.exit_code == 2 and "'bogus' is no run status" in said.stderr and "succeeded" in said.stderr
    assert as_json.exit_code == 2 and "'bogus' is no run status" in json.loads(as_json.stdout)["error"]


def test_trigger_refuses_a_timeout_without_wait(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.parity")

    result = invoke("trigger", "parity.three_stages", "--input", "1", "--timeout", "5")

    assert result.exit_code == 2 and "--timeout needs --wait" in result.stderr
    assert home_store(home).list_runs(limit=5) == []  # nothing started


@pytest.mark.parametrize(
    "args",
    [
        ("trigger", "parity.three_stages", "--input", "{not json", "--json"),
        ("trigger", "parity.three_stages", "--json", "--timeout", "0"),  # click's own range check
        ("runs", "list", "--json", "--limit", "0"),
        ("runs", "show", "--json"),  # a missing argument
    ],
    ids=["bad input", "bad timeout", "bad limit", "missing argument"],
)
def test_under_json_an_error_is_json_on_stdout_with_a_non_zero_exit(
    home: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.parity")

    result = invoke(*args)

    assert result.exit_code == 2, result.output
    printed = json.loads(result.stdout)
    assert printed["exit_code"] == 2 and printed["error"]


def test_trigger_json_waits_on_the_in_memory_broker_and_prints_id_status_and_result(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.parity")

    result = invoke("trigger", "parity.three_stages", "--input", "1", "--json")

    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == {
        "run_id": printed["run_id"],
        "status": "succeeded",
        "result": 17,
        "stopped_by": "complete",
    }
    assert "in-memory broker" in result.stderr
    record = json.loads(invoke("runs", "show", printed["run_id"], "--json").stdout)["run"]
    assert record["status"] == "succeeded"


def test_trigger_json_says_how_a_run_failed_and_exits_1(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.parity")

    result = invoke("trigger", "parity.count", "--input", "null", "--wait", "--json")

    assert result.exit_code == 1
    printed = json.loads(result.stdout)
    assert printed["status"] == "failed" and "TypeError" in printed["error"] and printed["run_id"]


def test_tools_in_json(home: Path) -> None:
    payload = {"name": "one", "description": "d", "parameters": {"type": "object"}}
    source = home / "tools.json"
    source.write_text(json.dumps({"t.one": payload}))

    loaded = json.loads(invoke("tools", "load", str(source), "--json").stdout)
    listed = json.loads(invoke("tools", "list", "--json").stdout)
    shown = json.loads(invoke("tools", "show", "t.one", "--json").stdout)

    assert loaded == {"loaded": ["t.one"]}
    assert [(tool["id"], tool["name"], tool["payload"]) for tool in listed] == [("t.one", "one", payload)]
    assert shown == payload


def test_runs_list_shows_each_runs_concurrency_key_and_the_keys_counts(
    two_runs: list[str], home: Path
) -> None:
    store = home_store(home)
    store.concurrency.acquire(run_id=SHORT, key="tenant-a", limit=1)  # SHORT is pending: it holds A's slot
    add_run(store, "waiting-run")
    store.concurrency.acquire(run_id="waiting-run", key="tenant-a", limit=1)

    listed = {run["id"]: run for run in json.loads(invoke("runs", "list", "--json").stdout)}
    assert (listed[SHORT]["concurrency_key"], listed[LONG]["concurrency_key"]) == ("tenant-a", None)
    row = next(line for line in invoke("runs", "list", "--wide").stdout.splitlines() if SHORT in line)
    assert "tenant-a" in row
    for holder, weight in ((f"{SHORT}\x1fb0", 2), (f"{SHORT}\x1fb1", 1)):  # a pack of two, then one
        store.concurrency.acquire(run_id=holder, key="tenant-a", kind="branch", limit=2, weight=weight)
    assert json.loads(invoke("runs", "list", "--keys", "--json").stdout) == [
        {"key": "tenant-a", "in_flight": 1, "waiting": 1, "waits": 1, "refused": 0, "evicted": 0,
         "branches_in_flight": 2, "branches_waiting": 1}
    ]  # fmt: skip
    table = invoke("runs", "list", "--keys", "--wide").stdout
    assert "tenant-a" in table and "in flight" in table and "branches" in table
    row = next(line for line in table.splitlines() if "tenant-a" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == [
        "tenant-a",
        "1",
        "1",
        "1",
        "0",
        "0",
        "2",
        "1",
    ]

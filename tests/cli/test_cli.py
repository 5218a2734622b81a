"""The ``agentloop`` command line: the demo (the README's first command), trigger, runs, tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import add_run, home_store, invoke


def test_the_demo_runs_on_embedded_defaults_and_prints_real_records(home: Path) -> None:
    result = invoke("demo")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("model") and "offline" in lines[0]
    assert lines[1].startswith("broker") and "memory://" in lines[1]
    header = result.output.split("workflow")[0]
    assert lines[2].startswith("database") and "sqlite" in header
    assert "Bright Data GmbH" in result.output  # a record from the sample database
    assert "[offline model]" in result.output  # model-written text is labelled
    assert "4 of 5 questions found records" in result.output
    assert "could not turn that into a record search" in result.output


def test_every_command_has_help() -> None:
    for command in ([], ["demo"], ["trigger"], ["runs"], ["runs", "list"], ["tools"], ["tools", "load"]):
        result = invoke(*command, "--help")
        assert result.exit_code == 0 and "Usage" in result.output


def test_the_commands_list_wraps_each_summary_at_the_terminal_width_only() -> None:
    # wide enough for every summary on one line: a docstring's own line break would show as a second
    for group in ([], ["runs"], ["tools"], ["eval"]):
        listed = invoke(*group, "--help", env={"COLUMNS": "240"}).output
        panel = listed[listed.index("Commands") :].splitlines()[1:-1]
        continued = [line for line in panel if line.startswith("│ ") and line[2] == " "]
        assert continued == [], f"agentloop {' '.join(group)} --help cuts a summary: {continued}"


def test_trigger_rejects_input_that_is_not_json(home: Path) -> None:
    result = invoke("trigger", "parity.count", "--input", "{not json")
    assert result.exit_code == 2
    assert "--input is not valid JSON" in result.output


def test_trigger_rejects_a_context_that_is_not_an_object(home: Path) -> None:
    result = invoke("trigger", "parity.count", "--input", "1", "--context", "[1]")
    assert result.exit_code == 2
    assert "--context must be a JSON object" in result.output


def test_trigger_names_only_registered_runnables(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.parity")
    result = invoke("trigger", "no.such.thing", "--input", "1")
    assert result.exit_code == 2
    assert "unknown runnable 'no.such.thing'" in result.output and "parity.count" in result.output


def test_trigger_waits_for_the_result_and_runs_show_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.parity")
    result = invoke("trigger", "parity.three_stages", "--input", "1", "--wait")
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run id: ")[1].split()[0]
    assert result.output.rstrip().endswith("17")  # 1 -> 4 -> 7, doubled to 14 -> 17

    listed = invoke("runs", "list")
    assert run_id[:8] in listed.output and "succeeded" in listed.output
    shown = invoke("runs", "show", run_id)
    assert shown.exit_code == 0 and "ThreeStages (root) done" in shown.output
    assert invoke("runs", "show", "nope").exit_code == 2


def test_a_failing_run_exits_with_1(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.parity")
    result = invoke("trigger", "parity.count", "--input", "null", "--wait")
    assert result.exit_code == 1
    assert "TypeError" in result.output


def test_tools_load_validates_every_payload_before_writing(home: Path) -> None:
    good = home / "good.json"
    good.write_text(
        json.dumps({"t.one": {"name": "one", "description": "d", "parameters": {"type": "object"}}})
    )
    bad = home / "bad.json"
    bad.write_text(json.dumps({"t.two": {"name": "two words", "parameters": {"type": "object"}}}))

    refused = invoke("tools", "load", str(good), str(bad))
    assert refused.exit_code == 2 and "t.two" in refused.output
    assert "t.one" not in invoke("tools", "list").output

    loaded = invoke("tools", "load", str(good))
    assert loaded.exit_code == 0 and "loaded 1 tool(s): t.one" in loaded.output
    assert "t.one" in invoke("tools", "list").output
    assert '"name": "one"' in invoke("tools", "show", "t.one").output
    assert invoke("tools", "show", "missing").exit_code == 2


def test_tools_load_rejects_a_file_that_is_not_json(home: Path) -> None:
    broken = home / "broken.json"
    broken.write_text("{")
    result = invoke("tools", "load", str(broken))
    assert result.exit_code == 2 and "not valid JSON" in result.output


def test_a_store_left_in_dot_agentloop_is_pointed_out_with_how_to_move_it(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTLOOP_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    add_run(home_store(home), "run-of-the-old-home", status="succeeded")  # ./.agentloop/agentloop.sqlite3

    moved = invoke("runs", "list", "--json")
    kept = invoke("runs", "list", "--json", env={"AGENTLOOP_HOME": str(home / ".agentloop")})

    assert json.loads(moved.stdout) == []  # the per-user home is another store
    assert "holds runs of the old default home (./.agentloop)" in moved.stderr
    assert f"mv .agentloop/agentloop.sqlite3* {home.resolve() / 'data' / 'agentloop'}/" in moved.stderr
    assert [run["id"] for run in json.loads(kept.stdout)] == ["run-of-the-old-home"]
    assert "old default home" not in kept.stderr


def test_runs_prune_dry_run_prints_what_would_go_and_prune_deletes_only_ended_runs(home: Path) -> None:
    store = home_store(home)
    add_run(store, "ended-1", status="succeeded")
    add_run(store, "ended-2", status="failed")
    add_run(store, "still-open")  # pending: never pruned

    dry = invoke("runs", "prune", "--older-than", "0.000001", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "Would delete 2 workflows" in dry.output and "ended-1" in dry.output and "ended-2" in dry.output
    assert store.get_run("ended-1") is not None

    kept = invoke("runs", "prune", "--older-than", "30d", "--json")
    assert json.loads(kept.output)["workflows"] == 0  # ended moments ago: younger than 30 days

    done = invoke("runs", "prune", "--older-than", "0.000001", "--json")
    assert json.loads(done.output)["workflows"] == 2
    assert store.get_run("ended-1") is None and store.get_run("ended-2") is None
    assert store.get_run("still-open") is not None


def test_runs_prune_needs_an_age_and_says_which_are_valid(home: Path) -> None:
    missing = invoke("runs", "prune", "--dry-run")
    assert missing.exit_code == 2 and "--older-than" in missing.output
    bad = invoke("runs", "prune", "--older-than", "a month")
    assert bad.exit_code == 2 and "such as 30d" in bad.output


@pytest.mark.parametrize("age", ["99999999999d", "1" + "0" * 30, "3000000000w"])
def test_runs_prune_refuses_an_age_longer_than_a_hundred_years_clearly(home: Path, age: str) -> None:
    refused = invoke("runs", "prune", "--older-than", age, "--dry-run")
    assert refused.exit_code == 2, refused.output
    assert "at most 100 years" in refused.output and "Traceback" not in refused.output

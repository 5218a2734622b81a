"""The README's "Regression tests and evals" (replay half), run as written in a user's folder: the
tutorial's ``trips.py`` recorded with ``--record``, exported, replayed (exit 0) and kept as a
regression test (passes); then its prompt changed: the replay exits 1 naming the step and the
field (the fixture's failure is tests/replay/test_replay_against_servers.py's)."""

from __future__ import annotations

from pathlib import Path

from docs_pages import section

from tests.newcomer import a_users_environment, typed, typed_one_by_one

PAGE, HEADING = "README.md", "## Regression tests and evals"


def test_the_readme_records_exports_and_replays_a_run_and_keeps_it_as_a_test(tmp_path: Path) -> None:
    blocks = section(PAGE, HEADING)  # the eval half's blocks are tests/docs/test_docs_blocks.py's
    [commands] = [block for block in blocks if "agentloop replay" in block.code]
    [test] = [block for block in blocks if block.code.startswith("# test_plan_replays.py")]
    [trips] = [
        b
        for b in section("docs/tutorial.md", "## A typed step, end to end")
        if b.code.startswith("# trips.py")
    ]
    (tmp_path / "trips.py").write_text(trips.code + "\n", encoding="utf-8")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["agentloop.testing"]\n', encoding="utf-8")
    (tmp_path / "test_plan_replays.py").write_text(test.code + "\n", encoding="utf-8")
    env = a_users_environment(tmp_path)

    # typed as the page gives them, in the folder of trips.py, with no PYTHONPATH
    for line, done in typed_one_by_one(tmp_path, commands.code, env):
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
    assert "matches its recording" in done.stdout
    passed = typed(tmp_path, "pytest -q -p no:cacheprovider test_plan_replays.py", env)
    assert passed.returncode == 0 and "1 passed" in passed.stdout, passed.stdout + passed.stderr

    source = (tmp_path / "trips.py").read_text()
    changed = source.replace("Plan the trip the traveller asks for.", "Plan a trip.")
    assert changed != source
    (tmp_path / "trips.py").write_text(changed)

    replayed = typed(tmp_path, "export AGENTLOOP_IMPORTS=trips\nagentloop replay plan.json", env)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "first divergence at step '(root)', iteration 0, model call 0" in replayed.stdout
    assert '  instruction: "Plan the trip the traveller asks for.' in replayed.stdout


def test_the_readme_replay_matches_with_tools_sync_run_on_one_side_only(tmp_path: Path) -> None:
    # the marker `tools sync` puts on the stored schema is never sent to the model: no divergence
    [commands] = [block for block in section(PAGE, HEADING) if "agentloop replay" in block.code]
    record, replay = commands.code.rsplit("\n", 1)
    assert replay.startswith("agentloop replay plan.json")
    [trips] = [
        b
        for b in section("docs/tutorial.md", "## A typed step, end to end")
        if b.code.startswith("# trips.py")
    ]
    (tmp_path / "trips.py").write_text(trips.code + "\n", encoding="utf-8")
    synced, fresh = a_users_environment(tmp_path / "synced"), a_users_environment(tmp_path / "fresh")
    sync = typed(tmp_path, "AGENTLOOP_IMPORTS=trips agentloop tools sync", synced)
    assert sync.returncode == 0 and "created" in sync.stdout, sync.stdout + sync.stderr

    for recording_home, replaying_home in ((synced, fresh), (fresh, synced)):
        recorded = typed(tmp_path, record, recording_home)
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr

        replayed = typed(tmp_path, f"export AGENTLOOP_IMPORTS=trips\n{replay}", replaying_home)

        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert "matches its recording" in replayed.stdout

"""The README's "Regression tests and evals" (replay half), run as written in a user's folder: the
tutorial's ``trips.py`` recorded with ``--record``, exported, replayed (exit 0) and kept as a
regression test (passes); then its prompt changed: the replay exits 1 naming the step and the
field (the fixture's failure is tests/replay/test_replay_against_servers.py's)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from docs_pages import section

from tests.newcomer import a_users_environment

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
    agentloop = str(Path(sys.executable).parent / "agentloop")

    def run(words: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    for line in commands.code.splitlines():
        words = shlex.split(line, comments=True)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            env[name] = value
            continue
        assert words[0] == "agentloop", line
        done = run([agentloop, *words[1:]])
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
    assert "matches its recording" in done.stdout
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plan_replays.py"]
    passed = run(pytest)
    assert passed.returncode == 0 and "1 passed" in passed.stdout, passed.stdout + passed.stderr

    source = (tmp_path / "trips.py").read_text()
    changed = source.replace("Plan the trip the traveller asks for.", "Plan a trip.")
    assert changed != source
    (tmp_path / "trips.py").write_text(changed)

    replayed = run([agentloop, "replay", "plan.json"])
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "first divergence at step '(root)', iteration 0, model call 0" in replayed.stdout
    assert '  instruction: "Plan the trip the traveller asks for.' in replayed.stdout

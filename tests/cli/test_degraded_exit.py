"""A run that returned but ended ``degraded`` (model calls failed, fallbacks answered) is not a
success at the command line: ``trigger --wait`` and ``agentloop demo`` exit 4 (the CLI reference's
exit codes), with the run's JSON or a ``degraded`` line; the offline model's runs are honest
successes and exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import invoke

from agentloop.orchestration.testing.servers.openai_replies import reply_error
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer
from tests.newcomer import a_users_environment, typed

EXIT_DEGRADED = 4


def test_trigger_wait_exits_4_on_a_degraded_run(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.eval")

    as_json = invoke("trigger", "evals.degraded", "--input", '"hi"', "--wait", "--json")
    plain = invoke("trigger", "evals.degraded", "--input", '"hi"', "--wait")

    assert as_json.exit_code == EXIT_DEGRADED, as_json.output
    printed = json.loads(as_json.stdout)  # the run as JSON still, for scripts
    assert (printed["status"], printed["result"]) == ("degraded", "HI")
    assert plain.exit_code == EXIT_DEGRADED, plain.output
    words = " ".join(plain.stdout.split())  # wrapped at words at the terminal's width
    assert "degraded" in words and "the model was away" in words
    succeeded = invoke("trigger", "evals.shout", "--input", '"hi"', "--wait", "--json")
    assert succeeded.exit_code == 0 and json.loads(succeeded.stdout)["status"] == "succeeded"


def test_the_demo_exits_4_when_its_model_fails_and_0_on_the_offline_model(tmp_path: Path) -> None:
    offline = typed(tmp_path, "agentloop demo")
    assert offline.returncode == 0, offline.stdout + offline.stderr  # the README's first command

    with OpenAICompatibleServer(responder=lambda body: reply_error(400, "no such model")) as server:
        env = {
            **a_users_environment(tmp_path),
            "OPENAI_API_KEY": "sk-test-degraded-demo-0123456789",
            "OPENAI_BASE_URL": server.base_url,
        }
        degraded = typed(tmp_path, "agentloop demo", env)

    assert degraded.returncode == EXIT_DEGRADED, degraded.stdout + degraded.stderr
    assert "degraded" in degraded.stderr
    assert server.completion_requests  # the model was asked, and failed

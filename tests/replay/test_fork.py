"""``agentloop replay RUN --fork-at PATH:ITERATION``: a recorded run of a real pipeline (an OpenAI
SDK against the local model server) forked with a changed step. The server's request count says
the fork asked the model only from the fork point on; the new run's record names its origin;
the fork's own recording replays; a fork point the recording lacks is refused before any call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fork_workflows as workflows
import pytest
from typer.testing import CliRunner

from agentloop import InlineAgentRunner, RunRecording
from agentloop.actions.recording import InMemoryRecording
from agentloop.orchestration.cli import app as cli
from agentloop.orchestration.forks import ForkPoint, fork
from agentloop.orchestration.store import open_store
from agentloop.testing import OpenAICompatibleServer

QUESTION = "How long is the word 'replays'?"
RECORDED_RUN = "0123456789abcdef0123456789abcdef"
CLEARED = ("BROKER_URL", "REDIS_URL", "RESULT_BACKEND", "DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL")


@dataclass
class Recorded:
    server: OpenAICompatibleServer
    home: Path
    requests: int  # the requests the recorded run made


@pytest.fixture
def recorded_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorded]:
    """``Plan`` run once against the local server, recorded, kept in the CLI's run store."""
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    with OpenAICompatibleServer(responder=workflows.answer) as server:
        monkeypatch.setenv("FORK_MODEL_URL", server.base_url)
        monkeypatch.setenv("AGENTLOOP_HOME", str(tmp_path))
        monkeypatch.setenv("AGENTLOOP_IMPORTS", "fork_workflows")
        recording = InMemoryRecording()
        runner = InlineAgentRunner.create(runnable=workflows.Plan, context=workflows.context(None))
        output = runner.request_sync(input=QUESTION, run_id=RECORDED_RUN, recording=recording)
        assert output == {"line": "polished"}
        store, _ = open_store(f"sqlite:///{tmp_path / 'agentloop.sqlite3'}")
        try:
            RunRecording(
                run_id=RECORDED_RUN,
                runnable="fork.plan",
                input=QUESTION,
                output=output,
                entries=tuple(recording.entries),
            ).to_store(store)
        finally:
            store.engine.dispose()
        yield Recorded(server, tmp_path, len(server.completion_requests))


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)


def test_a_fork_asks_the_model_only_from_its_point_on_as_a_new_run_naming_its_origin(
    recorded_plan: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert recorded_plan.requests == 5  # outline, three research turns, polish
    monkeypatch.setattr(workflows, "POLISH", "Rewrite the answer in one line.")  # the changed step

    result = invoke("replay", RECORDED_RUN, "--fork-at", "pipeline/1:1", "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    sent = recorded_plan.server.completion_requests[recorded_plan.requests :]
    assert len(sent) == report["live"] == 3  # research turns 1 and 2, and the changed polish step
    assert report["replayed"] == 2 and report["reached"] is True and report["divergences"] == []
    assert '\\"letters\\": 7' in json.dumps(sent[0]["messages"])  # it went on from iteration 1
    assert "Rewrite the answer" in json.dumps(sent[-1]["messages"])
    assert report["status"] == "succeeded" and report["output"] == {"line": "re-polished"}
    origin = {"run_id": RECORDED_RUN, "path": "pipeline/1", "iteration": 1}
    assert report["forked_from"] == origin

    shown = json.loads(invoke("runs", "show", report["run_id"], "--json").stdout)["run"]
    assert shown["forked_from"] == origin and shown["status"] == "succeeded"
    assert shown["output"] == {"line": "re-polished"} and shown["stopped_by"] == "complete"
    live_tokens = report["usage"]["input_tokens"] + report["usage"]["output_tokens"]
    assert shown["input_tokens"] + shown["output_tokens"] == live_tokens > 0
    original = json.loads(invoke("runs", "show", RECORDED_RUN, "--json").stdout)["run"]
    assert original["forked_from"] is None and original["output"] == {"line": "polished"}
    # the fork kept a whole recording of its own: it replays, with no model and no network
    replayed = invoke("replay", report["run_id"])
    assert replayed.exit_code == 0 and "matches its recording" in replayed.output, replayed.output
    assert len(recorded_plan.server.completion_requests) == recorded_plan.requests + 3


def test_a_step_changed_before_the_fork_point_is_asked_live_and_reported(
    recorded_plan: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workflows, "OUTLINE", "Outline the question in three words.")

    report = json.loads(invoke("replay", RECORDED_RUN, "--fork-at", "pipeline/2:0", "--json").stdout)

    # the changed outline's request is not the recorded one: it is asked; the research turns
    # ask what they asked (the same outline came back) and get their recorded replies
    assert (report["live"], report["replayed"]) == (2, 3)
    assert len(recorded_plan.server.completion_requests) == recorded_plan.requests + 2
    assert [(d["path"], d["reason"]) for d in report["divergences"]] == [
        ("pipeline/0", "the request differs from the recorded one")
    ]
    text = invoke("replay", RECORDED_RUN, "--fork-at", "pipeline/2:0")
    assert "sent live before the fork point: step 'pipeline/0'" in text.output
    assert "forked from run 0123456789abcdef0123456789abcdef at step 'pipeline/2', iteration 0" in text.output


def test_a_fork_point_the_recording_lacks_is_refused_before_any_model_call(recorded_plan: Recorded) -> None:
    unknown = invoke("replay", RECORDED_RUN, "--fork-at", "pipeline/1:7")
    malformed = invoke("replay", RECORDED_RUN, "--fork-at", "pipeline/1")

    assert unknown.exit_code == 2 and "recorded nothing at step 'pipeline/1', iteration 7" in unknown.output
    assert "'pipeline/1:2'" in unknown.output and "'pipeline/2:0'" in unknown.output
    assert malformed.exit_code == 2 and "a fork point is PATH:ITERATION" in malformed.output
    assert len(recorded_plan.server.completion_requests) == recorded_plan.requests
    runs = json.loads(invoke("runs", "list", "--json").stdout)
    assert [run["id"] for run in runs] == [RECORDED_RUN]  # no new run


async def test_the_python_call_forks_without_a_store(recorded_plan: Recorded) -> None:
    store, _ = open_store(f"sqlite:///{recorded_plan.home / 'agentloop.sqlite3'}")
    try:
        recording = RunRecording.from_store(store, RECORDED_RUN)
    finally:
        store.engine.dispose()

    report = await fork(
        recording, at=ForkPoint(path="pipeline/2"), runnable=workflows.Plan, context=workflows.context(None)
    )

    assert (report.live, report.replayed, report.status) == (1, 4, "succeeded")
    assert report.forked_from == {"run_id": RECORDED_RUN, "path": "pipeline/2", "iteration": 0}
    assert len(recorded_plan.server.completion_requests) == recorded_plan.requests + 1

"""The whole path, for both providers: a composite recorded on a real worker against the local
model server through the official SDK, exported, the server stopped, replayed with no model and no
network (it matches), then a prompt changed (the divergence is reported, at its step and field)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import replay_workflows as workflows
from typer.testing import CliRunner

from agentloop import AnthropicProcessor, OpenAIProcessor, StandardContext
from agentloop.actions.recording import MODEL, TOOL
from agentloop.orchestration.cli import app as cli
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.store import SqlRunStore, open_store
from agentloop.testing import AnthropicCompatibleServer, OpenAICompatibleServer, ReplayMismatch
from tests.services.worker_environment import embedded_app

INPUT = {"topics": ["tides", "glaciers"], "question": "How long is the word?"}
#: The variables the CLI must not inherit from the machine.
CLEARED = (
    "BROKER_URL", "REDIS_URL", "RESULT_BACKEND", "DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "AGENTLOOP_MODEL_PROVIDER",
)  # fmt: skip
SERVERS: dict[str, tuple[Any, Any]] = {
    "openai": (OpenAICompatibleServer, OpenAIProcessor),
    "anthropic": (AnthropicCompatibleServer, AnthropicProcessor),
}


@dataclass(frozen=True)
class Recorded:
    provider: str
    run_id: str
    output: Any
    store: SqlRunStore
    requests: int  # what the model server answered
    home: Path


@pytest.fixture(scope="module", params=sorted(SERVERS))
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    """``Digest`` recorded on an embedded worker against the provider's local server, now stopped
    (once per provider: the tests only read what it recorded). The OpenAI run is launched with
    ``record=True``; the Anthropic one on a deployment that records every run
    (``AGENTLOOP_RECORD_RUNS``)."""
    home = tmp_path_factory.mktemp(f"replay-{request.param}")
    store, _ = open_store(f"sqlite:///{home / 'agentloop.sqlite3'}")
    server_class, processor_class = SERVERS[request.param]
    with server_class(responder=workflows.answer) as server:

        def context(spec: Any) -> StandardContext:
            processor = processor_class(base_url=server.base_url, api_key="test", model="m", max_retries=0)
            return StandardContext(processor=processor, run_store=store)

        registry = RunnableRegistry()
        registry.register("replay.digest", workflows.Digest, context_factory=context)
        by_deployment = request.param == "anthropic"
        settings = Settings(record_runs=by_deployment)
        with embedded_app(registry, store, name="replay", settings=settings) as (app, _):
            runner = CeleryAgentRunner.create(runnable="replay.digest", app=app, store=store)
            handle = runner.request_sync(input=INPUT, record=not by_deployment)
            output = handle.wait_sync(timeout=60)
        requests = len(server.requests)
    try:
        yield Recorded(request.param, handle.run_id, output, store, requests, home)
    finally:
        store.engine.dispose()


@pytest.fixture(autouse=True)
def cli_home(recorded: Recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's settings: the store the run was recorded in, the module that registers ``Digest``."""
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTLOOP_HOME", str(recorded.home))
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "replay_workflows")


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)


def exported(recorded: Recorded, tmp_path: Path) -> Path:
    file = tmp_path / f"{recorded.provider}.json"
    result = invoke("runs", "export", recorded.run_id, "-o", str(file))
    assert result.exit_code == 0, result.output
    return file


def test_the_worker_records_every_step_and_export_writes_it_as_one_file(
    recorded: Recorded, tmp_path: Path
) -> None:
    data = json.loads(exported(recorded, tmp_path).read_text())

    assert data["run"]["runnable"] == "replay.digest" and data["run"]["input"] == INPUT
    assert data["run"]["output"] == recorded.output == {
        "topic-0": {"line": "a line about it"},
        "topic-1": {"line": "a line about it"},
        "research": {"answer": "seven letters", "finished": True, "stopped_by": "finish", "usage": {
            "input_tokens": recorded.output["research"]["usage"]["input_tokens"],
            "output_tokens": recorded.output["research"]["usage"]["output_tokens"],
        }},
    }  # fmt: skip
    places = [(e["path"], e["iteration"], e["kind"], e["seq"]) for e in data["entries"]]
    assert places == [
        ("branch/research", 0, MODEL, 0),
        ("branch/research", 0, TOOL, 0),
        ("branch/research", 1, MODEL, 0),
        ("branch/research", 1, TOOL, 0),
        ("branch/topic-0", 0, MODEL, 0),
        ("branch/topic-1", 0, MODEL, 0),
    ]
    assert sum(kind == MODEL for _, _, kind, _ in places) == recorded.requests == 4
    lookup = data["entries"][1]["data"]
    assert lookup["name"] == "lookup" and json.loads(lookup["result"])["result"] == {
        "term": "replays",
        "letters": 7,
    }


def test_the_replay_matches_with_the_server_gone_and_reports_a_changed_prompt(
    recorded: Recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = exported(recorded, tmp_path)

    for source in (str(file), recorded.run_id):
        result = invoke("replay", source)
        assert result.exit_code == 0, result.output
        assert "matches its recording" in result.output

    monkeypatch.setattr(workflows, "PROMPT", "Summarise the topic in three words.")
    result = invoke("replay", str(file))

    assert result.exit_code == 1, result.output
    assert "first divergence at step 'branch/topic-0', iteration 0, model call 0" in result.output
    assert '  instruction: "Summarise the topic in one line.' in result.output
    assert '-> "Summarise the topic in three words.' in result.output
    report = json.loads(invoke("replay", str(file), "--json").stdout)
    assert report["ok"] is False and report["output_changes"] == []
    assert [(d["path"], [c["field"] for c in d["changes"]]) for d in report["divergences"]] == [
        ("branch/topic-0", ["instruction"]),
        ("branch/topic-1", ["instruction"]),
    ]


def test_the_kits_fixture_turns_the_export_into_a_regression_test(
    recorded: Recorded,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    replay_recording: Callable[..., Any],
) -> None:
    file = exported(recorded, tmp_path)

    assert replay_recording(file, runnable=workflows.Digest).ok

    monkeypatch.setattr(workflows, "PROMPT", "Summarise the topic in three words.")
    with pytest.raises(ReplayMismatch) as mismatch:
        replay_recording(file, runnable=workflows.Digest)
    first = mismatch.value.report.first_divergence
    assert first is not None and first.path == "branch/topic-0"


def test_import_puts_a_file_into_another_store_for_replay_by_id(
    recorded: Recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = exported(recorded, tmp_path)
    monkeypatch.setenv("AGENTLOOP_HOME", str(tmp_path / "elsewhere"))

    result = invoke("runs", "import", str(file))

    assert result.exit_code == 0, result.output
    assert invoke("replay", recorded.run_id).exit_code == 0
    missing = invoke("replay", "no-such-run")
    assert missing.exit_code == 2 and "neither a file nor a run" in missing.output

"""pydantic-ai agents on real workers (issue 38): a private Redis, a SQLite run store, prefork
workers importing ``workflows.pydantic_agents``, the agents' ``openai`` SDK against the local
OpenAI-protocol server, which counts every request.

- A worker killed in the middle of a run (its tool hangs; the test kills the whole worker) is
  replaced by another, which resumes the run: no finished model request is sent again and no
  finished tool call runs again (counted at the server and in the tools' log); the result is the one
  the run gives inline; the run's usage in the store is every request's.
- A tool needing approval pauses the run (the worker is freed), ``agentloop resume`` answers it and
  the run goes on: the approved tool runs once, the model is asked once more. The agent as the
  first stage of a pipeline gives on the worker what it gives inline.

The workers keep the default ``AGENTLOOP_CHECKPOINT_SECONDS`` (0.5): a step is journalled whatever it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from workflows.pydantic_agents import InvoiceAgent, answer

from agentloop import InlineAgentRunner
from agentloop.orchestration.cli import app as cli
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.store import SqlRunStore
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer
from tests.services.worker import WorkerProcess
from tests.services.worker_environment import WorkerEnvironment

pytestmark = pytest.mark.integration

API_KEY = "sk-test-pydantic-ai-workers-0123456789"


@dataclass
class AgentRig:
    app: Any
    store: SqlRunStore
    server: OpenAICompatibleServer
    folder: Path
    env: dict[str, str]
    cli_env: dict[str, str]
    worker: Callable[[], AbstractContextManager[WorkerProcess]]

    def tools_run(self) -> list[tuple[str, int]]:
        log = self.folder / "tools.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [(line.split()[0], int(line.split()[1])) for line in lines]


@pytest.fixture
def agent_rig(tmp_path: Path) -> Iterator[AgentRig]:
    with ExitStack() as stack:
        server = stack.enter_context(OpenAICompatibleServer(api_key=API_KEY, responder=answer))
        env = {
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": API_KEY,
            "PAI_TOOL_LOG": str(tmp_path / "tools.log"),
            "PAI_HANG_FIRST_SUM": str(tmp_path / "hung"),
            # the killed worker's message comes back after the visibility timeout, waited out:
            # the fault suite's short limits (tests/faults/rig.py SHORT), which leave a fresh pool
            # process's first model call (it imports the OpenAI SDK) room on a loaded machine
            "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "12",
            "AGENTLOOP_TASK_TIME_LIMIT": "13",
            "AGENTLOOP_VISIBILITY_TIMEOUT": "14",
            "AGENTLOOP_UNACKED_RESTORE_SECONDS": "1",
        }
        services = WorkerEnvironment.start(stack, tmp_path, env=env)

        def worker() -> AbstractContextManager[WorkerProcess]:
            return services.worker(["workflows.pydantic_agents"])

        app = services.client()
        yield AgentRig(app, services.store, server, tmp_path, services.env, services.cli_env, worker)


def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.05)


def test_a_worker_killed_mid_run_is_resumed_by_another_repeating_no_finished_step(
    agent_rig: AgentRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    hung = agent_rig.folder / "hung"
    with agent_rig.worker() as first:
        handle = CeleryAgentRunner.create(
            runnable="pai.invoicer", app=agent_rig.app, store=agent_rig.store
        ).request_sync(input="invoice c-7")
        until(hung.exists, 60, "the second tool call")  # model/1, tool/1, model/2 done; tool/2 hangs
        assert len(agent_rig.server.completion_requests) == 2
        first.kill(signal.SIGKILL)
        first.wait(timeout=30)
    first_pid = int(hung.read_text())

    with agent_rig.worker():
        result = handle.wait_sync(timeout=120)

    assert result == {"customer": "ACME GmbH", "total": 200}
    assert len(agent_rig.server.completion_requests) == 3  # model/3 only, after the resume
    tools = agent_rig.tools_run()
    assert [name for name, _ in tools] == ["lookup_customer", "sum_lines"]  # each finished once
    assert tools[0][1] == first_pid and tools[1][1] != first_pid  # the second on the new worker
    events = [event for _, event in agent_rig.store.events(handle.run_id)]
    replayed = [e["data"]["step"] for e in events if e["data"].get("step_status") == "replayed"]
    assert replayed == ["model/1", "tool/1/call_1", "model/2"]
    record = agent_rig.store.get_run(handle.run_id)
    assert record is not None and record.status == "succeeded"
    completed = [
        e["data"]
        for e in events
        if e["phase"] == "model_request" and e["data"].get("step_status") == "completed"
    ]
    assert [data["step"] for data in completed] == ["model/1", "model/2", "model/3"]
    assert record.input_tokens == sum(data["input_tokens"] for data in completed) > 0
    assert record.output_tokens == sum(data["output_tokens"] for data in completed) > 0

    # the same result in this process
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "PAI_TOOL_LOG"):
        monkeypatch.setenv(name, agent_rig.env[name])
    assert InlineAgentRunner.create(runnable=InvoiceAgent).request_sync(input="invoice c-7") == result


def test_an_approval_pauses_the_run_and_an_answer_through_the_cli_resumes_it(
    agent_rig: AgentRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in agent_rig.cli_env.items():
        monkeypatch.setenv(name, value)
    with agent_rig.worker():
        handle = CeleryAgentRunner.create(
            runnable="pai.refunder", app=agent_rig.app, store=agent_rig.store
        ).request_sync(input="refund 40")

        def waiting() -> bool:
            record = agent_rig.store.get_run(handle.run_id)
            return record is not None and record.status == "waiting"

        until(waiting, 60, "the approval question")
        assert len(agent_rig.server.completion_requests) == 1 and agent_rig.tools_run() == []
        shown = CliRunner().invoke(cli, ["resume", handle.run_id, "--json"])
        assert shown.exit_code == 0, shown.output
        assert '"approval"' in shown.stdout and "refund" in shown.stdout

        said = CliRunner().invoke(cli, ["resume", handle.run_id, "--answer", "true"])
        assert said.exit_code == 0, said.output
        result = handle.wait_sync(timeout=60)

        # the same worker: the agent as the first stage of a pipeline (a chain of two tasks)
        agent_rig.folder.joinpath("hung").write_text("0")  # its sum_lines does not hang
        line = CeleryAgentRunner.create(runnable="pai.invoice_line", app=agent_rig.app, store=agent_rig.store)
        assert line.request_sync(input="invoice c-7").wait_sync(timeout=60) == "ACME GmbH: 200"

    assert result == "done: refunded 40"
    assert [name for name, _ in agent_rig.tools_run()][:1] == ["refund"]
    # the refunder's first request is not sent again; then the pipeline's agent's three
    assert len(agent_rig.server.completion_requests) == 2 + 3

"""An MCP server's tools as actions (issue 37): offered to the model, called by name, faults as
answers, durable within a run, recorded and replayed with no call. The servers are real
(``counting_server.py`` on the official SDK), each counting the calls it received."""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import timedelta
from typing import Any

import pytest
from mcp_support import Calls

from agentloop import AgentActionRegistry, AiDrivenAgentLoop, InlineAgentRunner, ProceduralAgentLoop
from agentloop.actions.errors import RunCancelledError, RunDeadlineExceededError
from agentloop.actions.recording import MCP_CALL, InMemoryRecording
from agentloop.actions.usage import InMemoryUsageMeter
from agentloop.loops.scope import CancellationToken
from agentloop.orchestration.errors import McpConfigError, McpUnavailableError, NetworkBlockedError
from agentloop.orchestration.mcp.servers import McpServer
from agentloop.orchestration.mcp.session import call_tool
from agentloop.orchestration.mcp.tools import McpToolAction, McpToolset
from agentloop.orchestration.replay import RunRecording, no_network, replay
from agentloop.orchestration.store import InMemoryToolStore
from agentloop.testing import ScriptedModel, text_reply, tool_call


def loop_over(actions: list[McpToolAction]) -> type[AiDrivenAgentLoop]:
    class Agent(AiDrivenAgentLoop):
        registry = AgentActionRegistry.create(actions=actions)

    return Agent


def tool_messages(model: ScriptedModel) -> list[dict[str, Any]]:
    last = model.requests[-1]
    return [json.loads(m["content"]) for m in last.history_messages if m.get("role") == "tool"]


async def test_an_ai_driven_loop_offers_the_servers_tools_and_the_model_gets_the_result(
    http: tuple[McpServer, Calls],
) -> None:
    server, calls = http
    actions = await McpToolset(server).load_actions()
    model = ScriptedModel([tool_call("add", {"a": 2, "b": 40}), text_reply("42")])
    runner = InlineAgentRunner.create(runnable=loop_over(actions), context={"processor": model})

    outcome = await runner.request_outcome(input="add them")

    offered = {tool["name"]: tool for tool in model.requests[0].tools}
    assert set(offered) == {"add", "lookup", "refuse", "slow", "steps", "huge", "die", "finish"}
    assert offered["add"]["parameters"]["required"] == ["a", "b"]
    assert tool_messages(model) == [{"ok": True, "result": {"result": 42}}]
    assert (outcome.status, outcome.result["answer"]) == ("succeeded", "42")
    assert calls.names() == ["add"]


async def test_the_filter_and_prefix_choose_and_name_the_actions(http: tuple[McpServer, Calls]) -> None:
    url, calls = http[0].url or "", http[1]
    server = McpServer.http("counting", url, include=("add", "look*"), exclude=("lookup",), prefix="calc_")

    actions = await McpToolset(server).load_actions()

    assert [action.name for action in actions] == ["calc_add"]
    assert calls.names() == []  # listing is no call
    with pytest.raises(McpConfigError, match="offers no tool 'huge'"):
        McpToolset(server).action("huge")


async def test_a_procedural_loop_calls_one_by_name_and_uses_its_structured_result(
    stdio: McpServer, calls: Calls
) -> None:
    registry = AgentActionRegistry.create(actions=await McpToolset(stdio).load_actions())

    class Weather(ProceduralAgentLoop):
        max_iterations = 1

        @property
        def registry(self) -> AgentActionRegistry:
            return registry

        def create_initial_state(self, *, input: Any) -> Any:
            return {"city": input, "report": None}

        async def advance_state(self, *, state: Any, iteration: int) -> Any:
            report = await self.perform_action(name="lookup", arguments={"city": state["city"]})
            return {**state, "report": report}

        def is_complete(self, *, state: Any, iteration: int) -> bool:
            return state["report"] is not None

        def build_result(self, *, state: Any) -> Any:
            return state["report"]["celsius"]

    assert await InlineAgentRunner.create(runnable=Weather).request(input="Oslo") == 21
    assert calls.names() == ["lookup"]


async def test_an_is_error_result_goes_back_to_the_model_as_a_tool_error(
    http: tuple[McpServer, Calls],
) -> None:
    server, calls = http
    actions = await McpToolset(server).load_actions()
    model = ScriptedModel([tool_call("refuse", {"reason": "closed"}), text_reply("sorry")])
    runner = InlineAgentRunner.create(runnable=loop_over(actions), context={"processor": model})

    outcome = await runner.request_outcome(input="try")

    (message,) = tool_messages(model)
    assert (
        message["ok"] is False
        and "McpToolError" in message["error"]
        and "refused: closed" in message["error"]
    )
    assert outcome.status == "succeeded"  # an answer, not an outage
    assert calls.names() == ["refuse"]


async def test_a_server_that_is_down_degrades_the_run_visibly(tmp_path: Any) -> None:
    down = McpServer.stdio("gone", [str(tmp_path / "no-such-server")])
    tool = McpToolAction(down, (await _listed("add")))
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text_reply("could not")])
    runner = InlineAgentRunner.create(runnable=loop_over([tool]), context={"processor": model})

    outcome = await runner.request_outcome(input="add")

    (message,) = tool_messages(model)
    assert message["ok"] is False and "McpUnavailableError" in message["error"]
    assert outcome.status == "degraded"
    (failure,) = outcome.failures
    assert failure.kind == "tool_unavailable" and "MCP server 'gone'" in failure.describe()


async def test_the_fail_policy_fails_the_run(tmp_path: Any) -> None:
    down = McpServer.stdio("gone", [str(tmp_path / "no-such-server")], on_outage="fail")
    tool = McpToolAction(down, (await _listed("add")))
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text_reply("never")])
    runner = InlineAgentRunner.create(runnable=loop_over([tool]), context={"processor": model})

    with pytest.raises(McpUnavailableError, match="MCP server 'gone'"):
        await runner.request_outcome(input="add")


async def test_a_server_that_dies_mid_call_is_an_outage_and_is_started_again_for_the_next(
    stdio: McpServer, calls: Calls
) -> None:
    actions = await McpToolset(stdio).load_actions()
    model = ScriptedModel([tool_call("die", {}), tool_call("add", {"a": 1, "b": 1}), text_reply("2")])
    runner = InlineAgentRunner.create(runnable=loop_over(actions), context={"processor": model})

    outcome = await runner.request_outcome(input="go")

    died, added = tool_messages(model)
    assert died["ok"] is False and "Connection closed" in died["error"]
    assert added == {"ok": True, "result": {"result": 2}}
    assert outcome.status == "degraded"
    assert calls.names() == ["die", "add"] and len(calls.pids()) == 2  # a new server process


async def test_a_huge_result_is_refused_at_its_limit_with_a_clear_error(
    http: tuple[McpServer, Calls],
) -> None:
    server = dataclasses.replace(http[0], max_result_bytes=10_000)

    outcome = await call_tool(server, "huge", {"size": 20_000})

    assert outcome["status"] == "refused"
    assert "more than its limit of 10000 (max_result_bytes)" in outcome["reason"]
    assert (await call_tool(server, "huge", {"size": 100}))["status"] == "ok"


async def test_progress_notifications_become_progress_events_of_the_step(
    http: tuple[McpServer, Calls],
) -> None:
    server, _calls = http
    actions = await McpToolset(server).load_actions()
    model = ScriptedModel([tool_call("steps", {"count": 3}), text_reply("done")])
    events: list[Any] = []
    runner = InlineAgentRunner.create(runnable=loop_over(actions), context={"processor": model})

    await runner.request_outcome(input="go", on_progress=events.append)

    progress = [event.data for event in events if event.phase == "mcp_progress"]
    assert [(p["progress"], p["total"]) for p in progress] == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]
    (call,) = [event.data for event in events if event.phase == "mcp_call"]
    assert (call["tool"], call["status"]) == ("steps", "ok")


async def test_the_runs_deadline_cuts_a_slow_call_short(http: tuple[McpServer, Calls]) -> None:
    server, calls = http
    actions = await McpToolset(server).load_actions()
    model = ScriptedModel([tool_call("slow", {"seconds": 30}), text_reply("never")])
    runner = InlineAgentRunner.create(runnable=loop_over(actions), context={"processor": model})

    events: list[Any] = []

    with pytest.raises(RunDeadlineExceededError, match="deadline"):
        await runner.request_outcome(input="go", deadline=timedelta(seconds=3), on_progress=events.append)
    assert calls.names() == ["slow"]
    assert [e for e in events if e.phase == "mcp_call"] == []  # cut short: the call never answered


async def test_cancelling_the_run_cuts_a_call_short(http: tuple[McpServer, Calls]) -> None:
    server, calls = http
    (slow,) = [a for a in await McpToolset(server).load_actions() if a.name == "slow"]
    token = CancellationToken()

    class Cancels(ProceduralAgentLoop):
        @property
        def registry(self) -> AgentActionRegistry:
            return AgentActionRegistry([slow])

        def create_initial_state(self, *, input: Any) -> Any:
            return {}

        async def advance_state(self, *, state: Any, iteration: int) -> Any:
            import asyncio

            async def cancel_once_called() -> None:
                while calls.count("slow") == 0:  # noqa: ASYNC110 - a file the server writes
                    await asyncio.sleep(0.05)
                token.cancel()

            canceller = asyncio.ensure_future(cancel_once_called())
            try:
                await self.perform_action(name="slow", arguments={"seconds": 30})
            finally:
                canceller.cancel()
            return state

        def is_complete(self, *, state: Any, iteration: int) -> bool:
            return False

        def build_result(self, *, state: Any) -> Any:
            return None

    events: list[Any] = []

    with pytest.raises(RunCancelledError, match="cancelled"):
        await InlineAgentRunner.create(runnable=Cancels).request(
            input=None, cancel=token, on_progress=events.append
        )
    assert [e for e in events if e.phase == "mcp_call"] == []  # cut short: the call never answered


async def test_a_recorded_run_replays_its_mcp_results_with_no_call(http: tuple[McpServer, Calls]) -> None:
    server, calls = http
    actions = await McpToolset(server).load_actions()
    agent = loop_over(actions)
    recording, meter = InMemoryRecording(), InMemoryUsageMeter()
    model = ScriptedModel([tool_call("add", {"a": 3, "b": 4}), text_reply("7")])
    output = await InlineAgentRunner.create(runnable=agent, context={"processor": model}).request(
        input="add", recording=recording, meter=meter
    )
    (entry,) = [e for e in recording.entries if e.kind == MCP_CALL]
    assert entry.data["outcome"]["value"] == {"result": 7}
    assert calls.count() == 1
    assert meter.tool_calls == 1  # the run's usage counts the call, as it counts model tokens

    report = await replay(
        RunRecording(
            run_id="r", runnable="agent", input="add", output=output, entries=tuple(recording.entries)
        ),
        runnable=agent,
        context={"processor": ScriptedModel()},
    )

    assert report.ok, report.describe()
    assert calls.count() == 1  # no call during the replay


async def test_the_replay_network_block_covers_stdio_and_local_http(stdio: McpServer, calls: Calls) -> None:
    local_http = McpServer.http("local", "http://127.0.0.1:9/mcp")
    with no_network():
        for server in (stdio, local_http):
            with pytest.raises(NetworkBlockedError, match="was not reached"):
                await call_tool(server, "add", {"a": 1, "b": 1})
    assert calls.count() == 0


async def test_secrets_never_reach_errors_or_the_repr() -> None:
    secret = "sk-very-secret-token-1234"
    server = McpServer.http(
        "remote", f"http://user:{secret}@127.0.0.1:9/mcp", headers={"Authorization": secret}
    )

    outcome = await call_tool(server, "add", {"a": 1, "b": 1})

    assert outcome["status"] == "unavailable"
    assert secret not in json.dumps(outcome) and secret not in repr(server)


async def test_a_changed_schema_is_reported_and_the_row_is_used_not_the_servers(
    http: tuple[McpServer, Calls], caplog: pytest.LogCaptureFixture
) -> None:
    server, _calls = http
    store = InMemoryToolStore()
    pinned = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    store.put("add", {"name": "add", "description": "Add.", "parameters": pinned})

    actions = await McpToolset(server).load_actions(tool_store=store)

    (add,) = [action for action in actions if action.name == "add"]
    assert add.parameters == pinned
    assert "differs from its AiTool row" in caplog.text


async def _listed(name: str) -> Any:
    from agentloop.orchestration.mcp.session import ListedTool

    return ListedTool(name=name, description="", parameters={"type": "object", "properties": {}})


def test_a_server_needs_a_command_or_a_url() -> None:
    with pytest.raises(McpConfigError, match="one of them"):
        McpServer(name="x")
    with pytest.raises(McpConfigError, match="one of them"):
        McpServer(name="x", command=(sys.executable,), url="http://h/mcp")

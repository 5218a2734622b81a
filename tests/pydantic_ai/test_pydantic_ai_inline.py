"""pydantic-ai agents as runnables in this process (issue 38): the official ``openai`` SDK under
pydantic-ai's ``OpenAIChatModel`` (and Anthropic's SDK under ``AnthropicModel``) against the local
protocol servers. Every model request and tool call is one step: reported, metered against the
run's budget, journalled, and answered from the journal when the run is taken again (zero calls at
the server, zero tool calls); approvals are the run's questions; cancel stops before the next step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from workflows.pydantic_agents import (
    InvoiceAgent,
    InvoiceThenLine,
    RefundAgent,
    answer,
)

from agentloop import (
    BaseCompositeAgent,
    Branch,
    CancellationToken,
    InlineAgentRunner,
    ProgressEvent,
    RunCancelledError,
    TokenBudgetExceededError,
    pydantic_ai_runnable,
)
from agentloop.loops.scope import RunScope, use_scope
from agentloop.orchestration.integrations.pydantic_ai import StepJournal
from agentloop.orchestration.integrations.pydantic_ai.journal import STATE_KEY
from agentloop.orchestration.testing.servers.anthropic_server import AnthropicCompatibleServer
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer

API_KEY = "sk-test-pydantic-ai-0123456789"


@pytest.fixture
def agent_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(api_key=API_KEY, responder=answer) as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
        monkeypatch.setenv("PAI_TOOL_LOG", str(tmp_path / "tools.log"))
        monkeypatch.delenv("PAI_HANG_FIRST_SUM", raising=False)
        yield running


def tools_run(tmp_path: Path) -> list[str]:
    log = tmp_path / "tools.log"
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


class MemoryCheckpointer:
    """The run store's checkpoints, in memory: the last (iteration, state) per path."""

    def __init__(self) -> None:
        self.saved: dict[str, tuple[int, Any]] = {}

    def load(self, *, path: str) -> tuple[int, Any] | None:
        return self.saved.get(path)

    def save(self, *, path: str, iteration: int, state: Any) -> None:
        self.saved[path] = (iteration, json.loads(json.dumps(state)))  # JSON, as a store keeps it


def test_the_agent_runs_as_a_runnable_with_a_progress_event_per_step(
    agent_server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    events: list[ProgressEvent] = []

    result = InlineAgentRunner.create(runnable=InvoiceAgent).request_sync(
        input="invoice c-7", on_progress=events.append
    )

    assert result == {"customer": "ACME GmbH", "total": 200}
    assert len(agent_server.completion_requests) == 3
    assert tools_run(tmp_path) == ["lookup_customer", "sum_lines"]
    steps = [(e.phase, e.data["step_status"], e.data["step"]) for e in events if "step" in e.data]
    assert steps == [
        ("model_request", "started", "model/1"),
        ("model_request", "completed", "model/1"),
        ("tool_call", "started", "tool/1/call_1"),
        ("tool_call", "completed", "tool/1/call_1"),
        ("model_request", "started", "model/2"),
        ("model_request", "completed", "model/2"),
        ("tool_call", "started", "tool/2/call_2"),
        ("tool_call", "completed", "tool/2/call_2"),
        ("model_request", "started", "model/3"),
        ("model_request", "completed", "model/3"),
    ]
    completed = [
        e.data for e in events if e.data.get("step_status") == "completed" and e.phase == "model_request"
    ]
    assert [list(data["tool_calls"]) for data in completed] == [
        ["lookup_customer"],
        ["sum_lines"],
        ["final_result"],
    ]
    assert all(data["input_tokens"] > 0 and data["output_tokens"] > 0 for data in completed)


def test_a_run_taken_again_answers_every_finished_step_from_its_journal(
    agent_server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    checkpointer = MemoryCheckpointer()
    scope = RunScope(run_id="run-pai-journal", checkpointer=checkpointer)

    async def take() -> Any:
        with use_scope(scope):
            return await InvoiceAgent.create().run(input="invoice c-7")

    import asyncio

    first = asyncio.run(take())
    requests_after_first = len(agent_server.completion_requests)
    again = asyncio.run(take())

    assert first == again == {"customer": "ACME GmbH", "total": 200}
    assert (
        requests_after_first == 3 and len(agent_server.completion_requests) == 3
    )  # zero calls the second time
    assert tools_run(tmp_path) == ["lookup_customer", "sum_lines"]  # no tool ran again
    iteration, state = checkpointer.saved[""]
    assert iteration == 5 and sorted(state[STATE_KEY]) == [
        "model/1",
        "model/2",
        "model/3",
        "tool/1/call_1",
        "tool/2/call_2",
    ]


def test_a_journal_cut_after_a_tool_call_resumes_at_the_next_model_request(
    agent_server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    """What a worker killed after the first tool call leaves: the steps up to it, and no more."""
    import asyncio

    checkpointer = MemoryCheckpointer()
    with use_scope(RunScope(run_id="run-pai-cut", checkpointer=checkpointer)):
        asyncio.run(InvoiceAgent.create().run(input="invoice c-7"))
    steps = checkpointer.saved[""][1][STATE_KEY]
    kept = {key: steps[key] for key in ("model/1", "tool/1/call_1")}
    resumed = MemoryCheckpointer()
    resumed.saved[""] = (2, {STATE_KEY: kept})
    before = len(agent_server.completion_requests)

    async def resume() -> tuple[Any, StepJournal]:
        with use_scope(RunScope(run_id="run-pai-cut", checkpointer=resumed)) as scope:
            return await InvoiceAgent.create().run(input="invoice c-7"), StepJournal.open(scope)

    result, journal = asyncio.run(resume())

    assert result == {"customer": "ACME GmbH", "total": 200}
    assert len(agent_server.completion_requests) - before == 2  # model/2 and model/3 only
    assert tools_run(tmp_path) == ["lookup_customer", "sum_lines", "sum_lines"]  # lookup not again
    assert len(journal.steps) == 5


def test_every_request_counts_against_the_token_budget(
    agent_server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    runner = InlineAgentRunner.create(runnable=InvoiceAgent)
    first_request = runner.request_sync(input="invoice c-7")
    assert first_request  # the tokens a whole run uses, for scale
    spent = len(agent_server.completion_requests)

    with pytest.raises(TokenBudgetExceededError):
        runner.request_sync(input="invoice c-7", token_budget=30)

    # the first request passed the budget: it is counted and nothing more is sent
    assert len(agent_server.completion_requests) - spent == 1
    assert tools_run(tmp_path) == ["lookup_customer", "sum_lines"]


def test_a_tool_needing_approval_is_the_runs_question(
    agent_server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    asked: list[Any] = []

    def approve(question: Any) -> bool:
        asked.append(question)
        return True

    result = InlineAgentRunner.create(runnable=RefundAgent).request_sync(
        input="refund 40", on_question=approve
    )

    assert result == "done: refunded 40"
    assert [(q.kind, q.key) for q in asked] == [("approval", "approve/call_1")]
    assert asked[0].prompt == 'Allow the agent to call refund({"amount": 40})?'
    assert tools_run(tmp_path) == ["refund"]


def test_a_denied_tool_call_never_runs(agent_server: OpenAICompatibleServer, tmp_path: Path) -> None:
    result = InlineAgentRunner.create(runnable=RefundAgent).request_sync(
        input="refund 40", on_question=lambda question: False
    )

    assert result.startswith("done: ") and "refunded" not in result
    assert tools_run(tmp_path) == []


def test_cancel_stops_the_run_before_its_next_step(
    agent_server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    token = CancellationToken()

    def cancel_after_the_first_tool(event: ProgressEvent) -> None:
        if event.phase == "tool_call" and event.data["step_status"] == "completed":
            token.cancel()

    with pytest.raises(RunCancelledError):
        InlineAgentRunner.create(runnable=InvoiceAgent).request_sync(
            input="invoice c-7", cancel=token, on_progress=cancel_after_the_first_tool
        )

    assert len(agent_server.completion_requests) == 1
    assert tools_run(tmp_path) == ["lookup_customer"]


class TwoInvoices(BaseCompositeAgent):
    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=InvoiceAgent, input=prompt, key=str(n)) for n, prompt in enumerate(input)]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


def test_the_agent_is_a_stage_of_a_pipeline_and_a_branch_of_a_composite(
    agent_server: OpenAICompatibleServer,
) -> None:
    line = InlineAgentRunner.create(runnable=InvoiceThenLine).request_sync(input="invoice c-7")
    both = InlineAgentRunner.create(runnable=TwoInvoices).request_sync(input=["invoice a", "invoice b"])

    assert line == "ACME GmbH: 200"
    assert both == [{"customer": "ACME GmbH", "total": 200}] * 2
    assert len(agent_server.completion_requests) == 9


def test_bad_input_is_a_clear_error(agent_server: OpenAICompatibleServer) -> None:
    with pytest.raises(ValueError, match="takes a prompt string"):
        InlineAgentRunner.create(runnable=InvoiceAgent).request_sync(input=7)
    assert agent_server.completion_requests == []


def test_anthropics_sdk_under_pydantic_ais_anthropic_model(tmp_path: Path) -> None:
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from agentloop.orchestration.testing.servers.openai_replies import reply_text, reply_tool_call

    script = [reply_tool_call("shout", {"word": "hi"}), reply_text("HI it is")]
    with AnthropicCompatibleServer(api_key=API_KEY, script=script) as server:
        model = AnthropicModel(
            "claude-test", provider=AnthropicProvider(api_key=API_KEY, base_url=server.base_url)
        )
        agent = Agent(model, name="shouter")
        calls: list[str] = []

        @agent.tool_plain
        def shout(word: str) -> str:
            calls.append(word)
            return word.upper()

        events: list[ProgressEvent] = []
        result = InlineAgentRunner.create(runnable=pydantic_ai_runnable(agent)).request_sync(
            input="shout hi", on_progress=events.append
        )

        assert result == "HI it is"
        assert calls == ["hi"] and len(server.posted("/v1/messages")) == 2
        models = {e.data.get("model") for e in events if e.phase == "model_request"}
        assert models == {"claude-test"}


def test_a_streaming_agents_text_arrives_as_delta_events_and_a_replay_streams_none() -> None:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from agentloop.orchestration.testing.servers.openai_replies import reply_text

    text = "The invoice of ACME GmbH comes to 200 euros."
    with OpenAICompatibleServer(api_key=API_KEY, script=[reply_text(text)], stream_chunk_size=6) as server:
        model = OpenAIChatModel(
            "test-model", provider=OpenAIProvider(base_url=server.base_url, api_key=API_KEY)
        )
        Streaming = pydantic_ai_runnable(Agent(model, name="teller"), stream=True)
        Streaming.stream_interval = timedelta(0)  # every piece its own event
        runner, checkpointer = InlineAgentRunner.create(runnable=Streaming), MemoryCheckpointer()
        events: list[ProgressEvent] = []
        result = runner.request_sync(input="total?", on_progress=events.append, checkpointer=checkpointer)
        again: list[ProgressEvent] = []
        replayed = runner.request_sync(input="total?", on_progress=again.append, checkpointer=checkpointer)

    deltas = [e.data for e in events if e.phase == "delta"]
    assert result == replayed == text and server.completion_requests[0]["stream"] is True
    assert len(deltas) > 3 and "".join(d["text"] for d in deltas) == text
    assert {e.runnable for e in events if e.phase == "delta"} == {"teller"}
    assert len(server.completion_requests) == 1  # the second run streamed from its journal
    assert [e.phase for e in again if e.phase == "delta"] == []
    assert [e.data["step_status"] for e in again if e.phase == "model_request"] == ["replayed"]


class CountedCalls:
    """Stands in for the metrics' instruments: each model call they were told of."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def model_called(self, **call: Any) -> None:
        self.calls.append(call)


def test_each_request_sent_is_in_the_metrics_and_a_replayed_one_is_not(
    agent_server: OpenAICompatibleServer,
) -> None:
    from typing import cast

    from agentloop.orchestration.metrics.record import use_instruments

    instruments, checkpointer = CountedCalls(), MemoryCheckpointer()
    previous = use_instruments(cast(Any, instruments))
    try:
        runner = InlineAgentRunner.create(runnable=InvoiceAgent)
        runner.request_sync(input="invoice c-7", checkpointer=checkpointer)
        runner.request_sync(input="invoice c-7", checkpointer=checkpointer)  # all from the journal
    finally:
        use_instruments(previous)

    assert [(c["provider"], c["model"], c["failed"]) for c in instruments.calls] == [
        ("openai", "test-model", False)
    ] * 3
    assert all(c["input_tokens"] > 0 for c in instruments.calls)


def test_the_shared_rate_limit_holds_back_requests_not_replayed_steps(
    agent_server: OpenAICompatibleServer,
) -> None:
    from agentloop import RateLimitTimeoutError
    from agentloop.orchestration.llm.limits.backends.memory import MemoryBackend
    from agentloop.orchestration.llm.limits.window import WindowRateLimiter

    limiter = WindowRateLimiter(MemoryBackend(), requests_per_minute=3, window=60, max_wait=0.05)
    runner = InlineAgentRunner.create(runnable=InvoiceAgent, context={"rate_limiter": limiter})
    checkpointer = MemoryCheckpointer()

    assert runner.request_sync(input="invoice c-7", checkpointer=checkpointer)["total"] == 200
    assert (
        runner.request_sync(input="invoice c-7", checkpointer=checkpointer)["total"] == 200
    )  # no slot taken
    with pytest.raises(RateLimitTimeoutError):
        runner.request_sync(input="invoice c-7")  # a fourth request in the window waits past max_wait

    assert len(agent_server.completion_requests) == 3


def test_a_recorded_run_replays_with_zero_model_calls(
    agent_server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    import asyncio

    from agentloop import InMemoryRecording
    from agentloop.orchestration.replay import RunRecording, replay

    recording = InMemoryRecording()
    result = InlineAgentRunner.create(runnable=InvoiceAgent).request_sync(
        input="invoice c-7", recording=recording
    )
    kinds = [(entry.kind, entry.seq) for entry in recording.entries]
    assert kinds == [("model", 0), ("model", 1), ("model", 2), ("tool", 0), ("tool", 1)]
    recorded = RunRecording(
        run_id="run-pai-recorded",
        runnable="pai.invoicer",
        input="invoice c-7",
        output=result,
        entries=tuple(recording.entries),
    )
    sent = len(agent_server.completion_requests)

    report = asyncio.run(replay(recorded, runnable=InvoiceAgent))

    assert report.ok, report.describe()
    assert report.output == result and len(agent_server.completion_requests) == sent  # no model call


def test_a_replay_that_asks_what_the_recording_does_not_have_is_a_divergence(
    agent_server: OpenAICompatibleServer,
) -> None:
    import asyncio

    from agentloop import InMemoryRecording
    from agentloop.orchestration.replay import RunRecording, replay

    recording = InMemoryRecording()
    result = InlineAgentRunner.create(runnable=InvoiceAgent).request_sync(
        input="invoice c-7", recording=recording
    )
    cut = tuple(entry for entry in recording.entries if not (entry.kind == "model" and entry.seq == 2))
    recorded = RunRecording(
        run_id="run-pai-cut", runnable="pai.invoicer", input="invoice c-7", output=result, entries=cut
    )

    report = asyncio.run(replay(recorded, runnable=InvoiceAgent))

    assert not report.ok
    assert report.error is not None and "ReplayedTurnError" in report.error
    assert [d.reason for d in report.divergences] == ["a model request the recording does not have"]

"""Streamed model output on a real worker: the record-search agent behind the real ``openai`` SDK,
streaming (``AGENTLOOP_MODEL_STREAM=1``) from the local OpenAI-protocol server. Its ``delta``
events reach the run's stored event feed and join to the tool arguments the model sent; the
result is the one the same agent gets unstreamed; a stream broken part-way degrades the run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from agentloop.examples.record_search import MODEL_UNAVAILABLE_MESSAGE, RecordSearchGenerator
from agentloop.examples.record_search.offline import extract_embedded_text, offline_responders
from agentloop.examples.record_search.resources import open_resources
from agentloop.examples.record_search.workflows import ASK
from agentloop.orchestration.client import CeleryAgentRunner, RunHandle
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.store import RunStore
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    Reply,
    reply_broken_stream,
    reply_tool_call,
)
from tests.services.worker_environment import WorkerEnvironment

pytestmark = pytest.mark.integration

API_KEY = "sk-test-streaming-worker-0123456789"
QUESTION = "Which software companies are in Germany?"


def answer_like_the_offline_model(body: dict[str, Any]) -> Reply:
    """The offline model's answer, as a forced tool call; a stream broken part-way for ``[break]``."""
    name = body["tool_choice"]["function"]["name"]
    instruction = body["messages"][0]["content"]
    arguments = offline_responders()[name](body["tools"][0]["function"], instruction, [])
    reply = reply_tool_call(name, arguments)
    if "[break]" in (extract_embedded_text(instruction, "user_request") or ""):
        return reply_broken_stream(reply, after_chunks=5)
    return reply


class StreamingRig:
    def __init__(self, app: Any, store: RunStore, server: OpenAICompatibleServer, database_url: str) -> None:
        self.app, self.store, self.server, self.database_url = app, store, server, database_url

    def ask(self, message: str) -> RunHandle:
        runner = CeleryAgentRunner.create(runnable=ASK, context={}, app=self.app, store=self.store)
        return runner.request_sync(input={"message": message})

    def events(self, handle: RunHandle) -> list[dict[str, Any]]:
        return [event for _, event in self.store.events(handle.run_id)]


@pytest.fixture(scope="module")
def streaming_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StreamingRig]:
    with ExitStack() as stack:
        server = OpenAICompatibleServer(
            api_key=API_KEY,
            responder=answer_like_the_offline_model,
            stream_chunk_size=8,
            stream_chunk_delay=0.005,
        )
        stream_env = {
            "OPENAI_MODEL": "test-model",
            "AGENTLOOP_MODEL_STREAM": "1",
            "AGENTLOOP_MODEL_STREAM_INTERVAL_SECONDS": "0.02",
        }
        services = WorkerEnvironment.start(
            stack,
            tmp_path_factory.mktemp("streaming"),
            file="agent.sqlite3",
            model=server,
            model_key=API_KEY,
            env=stream_env,
        )
        open_resources(services.database_url).dispose()  # the sample records and tools, before any task
        services.start_worker(["agentloop.examples.record_search.workflows"], concurrency=2)
        yield StreamingRig(services.client(), services.store, server, services.database_url)


async def unstreamed_result(streaming_rig: StreamingRig, message: str) -> dict[str, Any]:
    """What the same agent answers in this process, on the same server and records, not streaming."""
    processor = OpenAIProcessor(
        api_key=API_KEY, base_url=streaming_rig.server.base_url, model="test-model", max_retries=0
    )
    async with (
        processor,
        RecordSearchGenerator.create_with_defaults(
            database_url=streaming_rig.database_url, processor=processor
        ) as made,
    ):
        return await made.generate_for_explicit_search(message=message)


def test_deltas_reach_the_runs_event_feed_and_the_result_is_unchanged(streaming_rig: StreamingRig) -> None:
    handle = streaming_rig.ask(QUESTION)
    result = handle.wait_sync(timeout=120)
    expected = asyncio.run(unstreamed_result(streaming_rig, QUESTION))

    assert result == expected and result["found_count"] > 0
    assert handle.status == "succeeded"
    streamed_bodies = [body for body in streaming_rig.server.completion_requests if body.get("stream")]
    assert streamed_bodies and all(
        body["stream_options"] == {"include_usage": True} for body in streamed_bodies
    )
    deltas = [event for event in streaming_rig.events(handle) if event["phase"] == "delta"]
    assert {(event["runnable"], event["status"]) for event in deltas} == {("test-model", "progress")}
    assert [event["data"]["seq"] for event in deltas if event["data"]["seq"] == 1]  # one sequence per reply
    by_call: dict[str, str] = {}
    for event in deltas:
        by_call[event["data"]["call_id"]] = (
            by_call.get(event["data"]["call_id"], "") + event["data"]["arguments"]
        )
    assert len(by_call) >= 2  # one forced call per step of the agent
    for arguments in by_call.values():
        json.loads(arguments)  # every call's deltas join to its whole arguments
    assert len(deltas) > len(by_call)  # throttled, yet more than one event per call at this pace


def test_a_stream_broken_part_way_degrades_the_run_on_the_worker(streaming_rig: StreamingRig) -> None:
    handle = streaming_rig.ask(f"{QUESTION} [break]")
    result = handle.wait_sync(timeout=120)

    record = streaming_rig.store.get_run(handle.run_id)
    assert record is not None and record.status == "degraded"
    assert result["message"] == MODEL_UNAVAILABLE_MESSAGE
    (failure,) = record.error["failures"]
    assert "stream broken" in failure["reason"] and API_KEY not in failure["reason"]
    phases = [event["phase"] for event in streaming_rig.events(handle)]
    assert "delta" in phases and phases.index("delta") < phases.index("model_unavailable")

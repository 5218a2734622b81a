"""Model outages on a real worker: the record-search agent behind the real ``openai`` SDK, served
by a local OpenAI-protocol server that answers 429s, 500s, replies slower than the timeout and
malformed tool calls. Every such run ends ``degraded`` with the error recorded, answers that the
model was unavailable (not "please rephrase"), and its task's result and log line carry the mark."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from agentloop.examples.record_search import MODEL_UNAVAILABLE_MESSAGE, NO_PLAN_MESSAGE
from agentloop.examples.record_search.offline import extract_embedded_text, offline_responders
from agentloop.examples.record_search.resources import open_resources
from agentloop.examples.record_search.workflows import ASK
from agentloop.orchestration.client import CeleryAgentRunner, RunHandle
from agentloop.orchestration.store import RunStore
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    Reply,
    reply_delay,
    reply_error,
    reply_tool_call,
)
from agentloop.orchestration.wire import DegradedResult
from tests.services.worker import WorkerProcess
from tests.services.worker_environment import WorkerEnvironment

pytestmark = pytest.mark.integration

API_KEY = "sk-test-outage-key-0123456789"
#: Each kind of outage, and what the failure recorded on the run says.
OUTAGES = {
    "[429]": "429 rate limited after 2 attempts",
    "[500]": "500 server error after 2 attempts",
    "[timeout]": "request timed out after 2 attempts",
    "[malformed]": "tool arguments are not a JSON object",
}


def answer_like_the_offline_model(body: dict[str, Any]) -> Reply:
    name = body["tool_choice"]["function"]["name"]
    respond: Callable[..., Any] = offline_responders()[name]
    return reply_tool_call(name, respond(body["tools"][0]["function"], body["messages"][0]["content"], []))


def chaos(body: dict[str, Any]) -> Reply:
    """The outage a question asks for (its tag), else an answer like the offline model's."""
    message = extract_embedded_text(body["messages"][0]["content"], "user_request") or ""
    name = body["tool_choice"]["function"]["name"]
    if "[429]" in message:
        return reply_error(429, "slow down", headers={"retry-after-ms": "10"})
    if "[500]" in message:
        return reply_error(500, "upstream exploded")
    if "[timeout]" in message:
        return reply_delay(3.0, then=reply_tool_call(name, {}))
    if "[malformed]" in message:
        return reply_tool_call(name, '{"steps": [{"category_id": ')
    return answer_like_the_offline_model(body)


class OutageRig:
    def __init__(
        self, app: Any, store: RunStore, worker: WorkerProcess, server: OpenAICompatibleServer
    ) -> None:
        self.app, self.store, self.worker, self.server = app, store, worker, server

    def ask(self, message: str) -> RunHandle:
        runner = CeleryAgentRunner.create(runnable=ASK, context={}, app=self.app, store=self.store)
        return runner.request_sync(input={"message": message})


@pytest.fixture(scope="module")
def outage_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutageRig]:
    with ExitStack() as stack:
        server = OpenAICompatibleServer(api_key=API_KEY, responder=chaos)
        services = WorkerEnvironment.start(
            stack,
            tmp_path_factory.mktemp("outages"),
            file="agent.sqlite3",
            model=server,
            model_key=API_KEY,
            env={"OPENAI_MAX_RETRIES": "1", "OPENAI_TIMEOUT_SECONDS": "0.5"},
        )
        open_resources(services.database_url).dispose()  # the sample records and tools, before any task
        worker = services.start_worker(["agentloop.examples.record_search.workflows"], concurrency=4)
        yield OutageRig(services.client(), services.store, worker, server)


def test_every_kind_of_model_outage_ends_the_run_degraded_with_the_error_recorded(
    outage_rig: OutageRig,
) -> None:
    handles = {
        tag: [outage_rig.ask(f"Which software companies are in Germany? {tag}") for _ in range(2)]
        for tag in OUTAGES
    }

    for tag, reason in OUTAGES.items():
        for handle in handles[tag]:
            result = handle.wait_sync(timeout=120)
            record = outage_rig.store.get_run(handle.run_id)
            assert record is not None
            assert (tag, record.status) == (tag, "degraded")
            assert result["message"] == MODEL_UNAVAILABLE_MESSAGE != NO_PLAN_MESSAGE
            assert result["records"] == []
            (failure,) = record.error["failures"]
            assert failure["action"] == "plan_search" and reason in failure["reason"], failure
            assert API_KEY not in str(record.error)
            # What a Celery-only client's result.get() and Flower see: the status, not a plain success.
            raw = handle.result.get(timeout=10)
            assert raw["__agentloop_degraded__"]["status"] == "degraded"
            assert DegradedResult.from_wire(raw) == DegradedResult(output=result, error=record.error)
            events = [event for _, event in outage_rig.store.events(handle.run_id)]
            assert (events[-1]["phase"], events[-1]["status"]) == ("degraded", "completed")
            # one terminal event per run: the root's own done before it is a progress event
            ends = [
                (e["phase"], e["status"]) for e in events if e["path"] == "" and e["status"] != "progress"
            ]
            assert ends == [("start", "started"), ("degraded", "completed")], ends

    log = outage_rig.worker.log_text()
    assert log.count("; run degraded>") >= 2 * len(OUTAGES)  # the success lines keep the mark
    assert API_KEY not in log


def test_a_healthy_model_still_succeeds_and_an_off_topic_question_still_asks_to_rephrase(
    outage_rig: OutageRig,
) -> None:
    found = outage_rig.ask("Which software companies are in Germany?")
    off_topic = outage_rig.ask("What's the weather like today?")

    assert found.wait_sync(timeout=120)["found_count"] > 0
    assert off_topic.wait_sync(timeout=120)["message"] == NO_PLAN_MESSAGE
    assert found.status == off_topic.status == "succeeded"
    assert DegradedResult.from_wire(found.result.get(timeout=10)) is None

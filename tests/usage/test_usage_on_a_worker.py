"""Raw model calls on a real worker count against the run (issue 33, item 3): a loop calling
``ModelRequest.send`` three times, with ``token_budget: 1``, through the real ``openai`` SDK to
the local OpenAI-protocol server, whole and streamed. The run ends ``budget_exceeded`` after
its first call (the server counts the requests), and its stored usage is what the server said."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.errors import WorkflowFailedError
from agentloop.orchestration.store import RunStore
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer, reply_text
from tests.services.worker_environment import WorkerEnvironment

pytestmark = pytest.mark.integration

API_KEY = "sk-test-usage-worker-0123456789"
PROMPT, COMPLETION = 5, 11  # the tokens the server reports for each reply


class UsageRig:
    def __init__(self, app: Any, store: RunStore, server: OpenAICompatibleServer, *, stream: bool) -> None:
        self.app, self.store, self.server, self.stream = app, store, server, stream


def rig_for(stack: ExitStack, folder: Path, *, stream: bool) -> UsageRig:
    server = OpenAICompatibleServer(
        api_key=API_KEY,
        responder=lambda body: reply_text("a reply", usage=(PROMPT, COMPLETION)),
        stream_chunk_size=3,
    )
    services = WorkerEnvironment.start(
        stack,
        folder,
        model=server,
        model_key=API_KEY,
        env={"OPENAI_MODEL": "test-model", "AGENTLOOP_MODEL_STREAM": "1" if stream else "0"},
    )
    services.start_worker(["workflows.usage"], concurrency=1)
    return UsageRig(services.client(), services.store, server, stream=stream)


@pytest.fixture(scope="module", params=[False, True], ids=["whole", "streamed"])
def usage_rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UsageRig]:
    with ExitStack() as stack:
        yield rig_for(stack, tmp_path_factory.mktemp("usage"), stream=request.param)


def test_raw_model_calls_on_a_worker_count_and_a_budget_stops_the_run(usage_rig: UsageRig) -> None:
    runner = CeleryAgentRunner.create(
        runnable="usage.send_thrice", context={}, app=usage_rig.app, store=usage_rig.store
    )
    before = len(usage_rig.server.completion_requests)

    handle = runner.request_sync(input="x", token_budget=1)
    with pytest.raises(WorkflowFailedError) as stopped:
        handle.wait_sync(timeout=60)

    assert stopped.value.error_type == "TokenBudgetExceededError", stopped.value.message
    requests = usage_rig.server.completion_requests[before:]
    assert len(requests) == 1  # the first call passed the budget: no second call
    assert bool(requests[0].get("stream")) is usage_rig.stream
    record = usage_rig.store.get_run(handle.run_id)
    assert record is not None and record.status == "budget_exceeded"
    assert (record.input_tokens, record.output_tokens) == (PROMPT, COMPLETION)
    assert handle.usage is not None
    assert (handle.usage["input_tokens"], handle.usage["output_tokens"]) == (PROMPT, COMPLETION)


def test_raw_model_calls_without_a_budget_all_count(usage_rig: UsageRig) -> None:
    runner = CeleryAgentRunner.create(
        runnable="usage.send_thrice", context={}, app=usage_rig.app, store=usage_rig.store
    )
    before = len(usage_rig.server.completion_requests)

    handle = runner.request_sync(input="x")
    result = handle.wait_sync(timeout=60)

    assert result == ["a reply"] * 3
    assert len(usage_rig.server.completion_requests) - before == 3
    record = usage_rig.store.get_run(handle.run_id)
    assert record is not None and record.status == "succeeded"
    assert (record.input_tokens, record.output_tokens) == (3 * PROMPT, 3 * COMPLETION)

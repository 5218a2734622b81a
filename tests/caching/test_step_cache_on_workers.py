"""Step caching on real workers: two worker processes share cached results through a private Redis.

Each worker consumes a queue of its own (``AGENTLOOP_TASK_DEFAULT_QUEUE``), and each run is sent to
one of them, so a run's tasks all run in that worker's processes. The model is the local
OpenAI-protocol server behind the real SDK; its request log says which runs called it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import redis
from workflows.caching import LabelTicket

from agentloop.orchestration.client import CeleryAgentRunner, RunHandle
from agentloop.orchestration.runtime.step_cache import CACHE_KEY_PREFIX
from agentloop.orchestration.store import SqlRunStore, SqlToolStore
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    Reply,
    reply_error,
    reply_tool_call,
)
from tests.services.worker_environment import WorkerEnvironment

pytestmark = pytest.mark.integration

API_KEY = "sk-test-caching-0123456789"
#: What one model answer costs (prompt, completion tokens): what a hit saves.
ANSWER_USAGE = (25, 5)


def label(body: dict[str, Any]) -> Reply:
    return reply_tool_call("label_ticket", {"label": "bug", "confidence": 0.9}, usage=ANSWER_USAGE)


class CachingRig:
    def __init__(
        self, apps: dict[str, Any], store: SqlRunStore, tools: SqlToolStore, server: Any, redis_url: str
    ) -> None:
        self.apps, self.store, self.tools, self.server = apps, store, tools, server
        self.redis = redis.Redis.from_url(redis_url)

    def cache_keys(self) -> set[bytes]:
        """The step cache's keys in the workers' Redis now."""
        return set(self.redis.scan_iter(match=CACHE_KEY_PREFIX + "*"))

    def run(self, queue: str, ticket: str, runnable: str = "caching.label") -> RunHandle:
        runner = CeleryAgentRunner.create(runnable=runnable, app=self.apps[queue], store=self.store)
        handle = runner.request_sync(input={"text": ticket})
        handle.wait_sync(timeout=60)
        return handle

    def model_calls(self, ticket: str) -> int:
        return sum(ticket in json.dumps(body["messages"]) for body in self.server.completion_requests)

    def cache_events(self, handle: RunHandle) -> list[dict[str, Any]]:
        events = [event for _, event in self.store.events(handle.run_id)]
        return [event for event in events if event["phase"] in ("cache_hit", "cache_miss")]


@pytest.fixture(scope="module")
def caching_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CachingRig]:
    with ExitStack() as stack:
        server = OpenAICompatibleServer(api_key=API_KEY, responder=label)
        services = WorkerEnvironment.start(
            stack, tmp_path_factory.mktemp("caching"), file="agent.sqlite3", model=server, model_key=API_KEY
        )
        services.tools.put("label_ticket", LabelTicket.tool_payload())
        queues = {"a": {}, "b": {}, "down": {"AGENTLOOP_CACHE_URL": "redis://127.0.0.1:1/0"}}
        apps = {}
        for queue, extra in queues.items():
            services.start_worker(["workflows.caching"], queue=queue, env=extra, concurrency=1)
            apps[queue] = services.client(queue=queue)
        yield CachingRig(apps, services.store, services.tools, server, services.redis.url)


def ticket() -> str:
    return f"The app crashes on start ({uuid.uuid4().hex[:8]})."


def test_a_result_cached_by_one_worker_is_a_hit_on_the_other_which_calls_no_model(
    caching_rig: CachingRig,
) -> None:
    text = ticket()
    first = caching_rig.run("a", text)
    second = caching_rig.run("b", text)

    assert first.wait_sync(timeout=10) == second.wait_sync(timeout=10) == {"label": "bug", "confidence": 0.9}
    assert caching_rig.model_calls(text) == 1
    (miss,), (hit,) = caching_rig.cache_events(first), caching_rig.cache_events(second)
    assert (miss["phase"], hit["phase"]) == ("cache_miss", "cache_hit")
    assert hit["runnable"] == "label_ticket" and hit["data"]["key"] == miss["data"]["key"]
    assert hit["data"]["tokens_saved"] == sum(ANSWER_USAGE)
    assert first.usage == {
        "input_tokens": 25,
        "output_tokens": 5,
        "cache_hits": 0,
        "cache_misses": 1,
        "tokens_saved": 0,
        "tool_calls": 0,
    }
    assert second.usage == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_hits": 1,
        "cache_misses": 0,
        "tokens_saved": 30,
        "tool_calls": 0,
    }


def test_a_degraded_model_call_is_never_cached(caching_rig: CachingRig) -> None:
    text = ticket()
    caching_rig.server.enqueue(reply_error(500, "upstream exploded"))
    failed = caching_rig.run("a", text)
    assert failed.status == "degraded"

    good = caching_rig.run("b", text)
    again = caching_rig.run("a", text)

    assert good.status == again.status == "succeeded"
    assert caching_rig.model_calls(text) == 2  # the degraded run's, and the next one's: not its fallback
    assert [e["phase"] for e in caching_rig.cache_events(good) + caching_rig.cache_events(again)] == [
        "cache_miss",
        "cache_hit",
    ]


def test_a_changed_tool_schema_in_the_tool_table_is_a_new_key(caching_rig: CachingRig) -> None:
    text = ticket()
    before = caching_rig.run("a", text)
    caching_rig.tools.put(
        "label_ticket", {**LabelTicket.tool_payload(), "description": "Label a ticket (v2)."}
    )
    try:
        after = caching_rig.run("b", text)
        repeated = caching_rig.run("a", text)
    finally:
        caching_rig.tools.put("label_ticket", LabelTicket.tool_payload())

    assert caching_rig.model_calls(text) == 2
    (old,), (new,), (hit,) = (caching_rig.cache_events(h) for h in (before, after, repeated))
    assert (old["phase"], new["phase"], hit["phase"]) == ("cache_miss", "cache_miss", "cache_hit")
    assert old["data"]["key"] != new["data"]["key"] == hit["data"]["key"]


def test_a_redis_that_cannot_be_reached_is_a_miss_not_a_failure(caching_rig: CachingRig) -> None:
    text = ticket()
    runs = [caching_rig.run("down", text) for _ in range(2)]

    assert [handle.status for handle in runs] == ["succeeded", "succeeded"]
    assert caching_rig.model_calls(text) == 2
    assert [e["phase"] for h in runs for e in caching_rig.cache_events(h)] == ["cache_miss", "cache_miss"]
    assert [h.usage["cache_misses"] for h in runs if h.usage] == [1, 1]


def test_a_result_expires_in_redis_after_its_ttl(caching_rig: CachingRig) -> None:
    # Redis's own clock, not the test's: the entry is written with the 1 s ttl, and once Redis has
    # let it go the next run is a miss that calls the model again. (A hit before the expiry is
    # the first test's; here it would race the ttl on a loaded machine.)
    text = ticket()
    before = caching_rig.cache_keys()
    first = caching_rig.run("a", text, runnable="caching.short")  # BriefLabelStage: cache_ttl = 1 s
    (key,) = caching_rig.cache_keys() - before
    assert 0 < caching_rig.redis.pttl(key) <= 1000
    for _ in range(600):  # Redis expires it; the bound only stops a broken expiry hanging the test
        if not caching_rig.redis.exists(key):
            break
        time.sleep(0.05)
    assert not caching_rig.redis.exists(key)
    expired = caching_rig.run("b", text, runnable="caching.short")

    assert [e["phase"] for h in (first, expired) for e in caching_rig.cache_events(h)] == [
        "cache_miss",
        "cache_miss",
    ]
    assert caching_rig.model_calls(text) == 2

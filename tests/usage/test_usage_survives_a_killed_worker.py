"""Every model call the server answered counts against its run, when the worker process that
made it is killed (SIGKILL) after its checkpoints and the run resumes from them: a loop alone
and a pack's branches (one meter for the pack), on a real worker, through the real ``openai``
SDK to the local OpenAI-protocol server.

Before: a run without a budget buffers its usage and writes it every second or with the loop's
result; a process killed meanwhile lost the usage of every call before its last checkpoint,
which the resumed loop does not make again (the run counted 2 of 5 calls' tokens here).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    Reply,
    reply_disconnect,
    reply_text,
)
from tests.faults.rig import children_of
from tests.services.worker_environment import WorkerEnvironment

pytestmark = pytest.mark.integration

API_KEY = "sk-test-usage-killed-0123456789"
PROMPT, COMPLETION = 5, 11  # the tokens the server reports for each reply
CALLS, HELD_AT = 5, 3  # each loop's calls; the one held until the kill (after 3 checkpoints)
_MARKER = re.compile(r"\[packed:([^\]:]+):(\d+)\]")  # parity.tagged_model_calls' asks


class HoldingModel:
    """Answers each marked call with the same usage, counting the answers per loop; holds each
    loop's call of iteration :data:`HELD_AT` (its checkpoint of the iteration before is stored:
    the loop made it) until :attr:`release`, then drops it unanswered."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answered: Counter[str] = Counter()
        self.held: set[str] = set()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        found = _MARKER.search(json.dumps(body))
        assert found is not None, body
        tag, iteration = found.group(1), int(found.group(2))
        if iteration == HELD_AT and not self.release.is_set():
            with self.lock:
                self.held.add(tag)
            self.release.wait(60)
            return reply_disconnect()  # its process is dead: never answered
        with self.lock:
            self.answered[tag] += 1
        return reply_text("a reply", usage=(PROMPT, COMPLETION))


def _wait(until: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("shape", ["alone", "packed"])
def test_usage_of_every_answered_call_counts_after_a_kill(tmp_path: Path, shape: str) -> None:
    model = HoldingModel()
    with ExitStack() as stack:
        services = WorkerEnvironment.start(
            stack,
            tmp_path,
            model=OpenAICompatibleServer(api_key=API_KEY, responder=model),
            model_key=API_KEY,
            # a checkpoint after every iteration: the kill comes after the third
            env={"OPENAI_MODEL": "test-model", "AGENTLOOP_CHECKPOINT_SECONDS": "0"},
        )
        worker = services.start_worker(["workflows.parity"], concurrency=1)
        app = services.client()
        tag = uuid.uuid4().hex[:10]
        if shape == "alone":
            runnable, payload, tags = "parity.tagged_model_calls", {"tag": tag, "calls": CALLS}, [tag]
        else:
            runnable = "parity.packed_model_calls"  # its two branches in one pack
            payload = {"tag": tag, "calls": CALLS, "width": 2}
            tags = [f"{tag}/0", f"{tag}/1"]
        runner = CeleryAgentRunner.create(runnable=runnable, context={}, app=app, store=services.store)
        handle = runner.request_sync(input=payload)

        _wait(lambda: model.held == set(tags), 60, f"held {model.held}: {worker.log_text()[-2000:]}")
        # the pool's processes, the one making the calls among them
        pool = children_of(worker.pid)
        assert pool, "the worker has no pool process"
        for child in pool:
            os.kill(child, signal.SIGKILL)
        _wait(lambda: not set(pool) & set(children_of(worker.pid)), 10, "a pool process outlived SIGKILL")
        model.release.set()
        result = handle.wait_sync(timeout=90)

        assert result == (CALLS if shape == "alone" else [CALLS, CALLS])
        assert model.answered == dict.fromkeys(tags, CALLS)  # each call answered once: resumed, not redone
        record = services.store.get_run(handle.run_id)
        assert record is not None and record.status == "succeeded"
        answered = sum(model.answered.values())
        assert (record.input_tokens, record.output_tokens) == (answered * PROMPT, answered * COMPLETION)

"""The OpenAI-compatible test server itself: the Chat Completions wire format, and a prompt stop."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    reply_completion,
    reply_delay,
)


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_server_speaks_the_chat_completions_wire_format() -> None:
    with OpenAICompatibleServer(api_key="k") as server:
        url = server.base_url + "/chat/completions"
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
        }
        server.enqueue(reply_completion(content="both", tool_calls=[("g", "raw")], usage=(3, 4)))

        scripted = post(url, body, {"Authorization": "Bearer k"})
        default_forced = post(url, body, {"Authorization": "Bearer k"})
        missing_key = post(url, body)
        wrong_key = post(url, body, {"Authorization": "Bearer nope"})
        unknown_path = post(server.base_url + "/responses", body, {"Authorization": "Bearer k"})
        thread = server._thread

    status, completion = scripted
    assert status == 200
    assert completion["object"] == "chat.completion" and completion["model"] == "m"
    assert isinstance(completion["id"], str) and isinstance(completion["created"], int)
    assert completion["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "both",
                "refusal": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "g", "arguments": "raw"}}
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ]
    assert completion["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert default_forced[1]["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "f",
        "arguments": "{}",
    }
    assert missing_key[0] == 401 and wrong_key[0] == 401
    assert missing_key[1]["error"]["code"] == "invalid_api_key"
    assert unknown_path[0] == 404
    assert len(server.requests) == 5
    assert thread is not None and not thread.is_alive()
    assert not server.running


def test_stopping_the_server_abandons_a_delayed_reply_promptly() -> None:
    # the reply would come after 10 minutes: a caller that is done within the ceiling below was
    # answered by the stop (with an error), never by the reply
    server = OpenAICompatibleServer(script=[reply_delay(600.0)]).start()
    url = server.base_url + "/chat/completions"

    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(post(url, {"model": "m", "messages": []}, {"Authorization": "Bearer k"}))
        except Exception as error:
            outcome.append(error)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    for _ in range(6000):  # until the request reaches the server (a ceiling of 60 s for a hung test)
        if server.requests:
            break
        time.sleep(0.01)
    assert server.requests, "the request never reached the server"
    server.stop()
    caller.join(60)

    assert not caller.is_alive()
    assert outcome and isinstance(outcome[0], Exception)

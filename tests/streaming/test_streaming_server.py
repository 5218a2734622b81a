"""The local OpenAI-protocol server in streaming mode, as a user's code on the ``openai`` SDK and a
raw HTTP client see it: SSE chunks that join back to the reply, usage last when asked for."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest
from streaming_support import API_KEY

from agentloop.orchestration.testing.servers.openai_chunks import completion_chunks
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    reply_broken_stream,
    reply_completion,
    reply_text,
)

MESSAGES = [{"role": "user", "content": "hi"}]


def raw_events(server: OpenAICompatibleServer, **body: Any) -> tuple[httpx.Response, list[str]]:
    response = httpx.post(
        f"{server.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {API_KEY}"},
        json={"model": "m", "messages": MESSAGES, "stream": True, **body},
    )
    return response, [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]


def test_a_streamed_reply_is_server_sent_events_ending_with_done(server: OpenAICompatibleServer) -> None:
    server.enqueue(reply_text("Hello, world"))

    response, events = raw_events(server)

    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["transfer-encoding"] == "chunked"
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert [chunk["choices"][0]["delta"] for chunk in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "Hell"},
        {"content": "o, w"},
        {"content": "orld"},
        {},
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in chunk for chunk in chunks)  # not asked for


def test_the_usage_comes_last_when_asked_for(server: OpenAICompatibleServer) -> None:
    server.enqueue(reply_text("Hello", usage=(3, 2)))

    _, events = raw_events(server, stream_options={"include_usage": True})

    *chunks, usage = [json.loads(event) for event in events[:-1]]
    assert all(chunk["usage"] is None for chunk in chunks)
    assert (usage["choices"], usage["usage"]) == (
        [],
        {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    )


def test_chunks_join_back_to_the_whole_completion() -> None:
    completion = {
        "id": "chatcmpl-1",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "message": {
                    "content": "Plan:",
                    "tool_calls": [
                        {"id": "call_1", "function": {"name": "plan", "arguments": '{"steps": ["a"]}'}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }

    chunks = completion_chunks(completion, chunk_size=3, include_usage=False)

    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    assert "".join(delta.get("content") or "" for delta in deltas) == "Plan:"
    calls = [call for delta in deltas for call in delta.get("tool_calls", ())]
    assert calls[0] == {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "plan", "arguments": ""},
    }
    assert "".join(call["function"]["arguments"] for call in calls) == '{"steps": ["a"]}'
    assert all(len(call["function"]["arguments"]) <= 3 for call in calls)
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
    }


def test_the_sdk_streams_the_scripted_reply_in_pieces_of_the_chunk_size() -> None:
    with OpenAICompatibleServer(stream_chunk_size=2, stream_chunk_delay=0.02) as server:
        server.enqueue(reply_completion(content="abcdefgh", usage=(4, 4)))
        client = openai.OpenAI(api_key="test", base_url=server.base_url, max_retries=0)
        started = time.monotonic()
        with client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        ) as stream:
            pieces = [chunk.choices[0].delta.content for chunk in stream if chunk.choices]
        elapsed = time.monotonic() - started
        client.close()

    assert pieces == ["", "ab", "cd", "ef", "gh", None]
    assert elapsed >= 6 * 0.02  # seven chunks, 20 ms apart


def test_a_broken_stream_asked_for_unstreamed_drops_the_connection(server: OpenAICompatibleServer) -> None:
    server.enqueue(reply_broken_stream(after_chunks=2))

    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(
            f"{server.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={"model": "m", "messages": MESSAGES},
        )


def test_bad_stream_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="stream_chunk_size must be positive"):
        OpenAICompatibleServer(stream_chunk_size=0)
    with pytest.raises(ValueError, match="after_chunks must not be negative"):
        reply_broken_stream(after_chunks=-1)

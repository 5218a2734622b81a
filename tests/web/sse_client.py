"""A small Server-Sent Events reader over an httpx streaming response, for the tests."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Frame:
    event: str
    id: str | None
    data: Any
    comment: bool = False


async def frames(response: httpx.Response) -> AsyncGenerator[Frame, None]:
    """Each frame of the stream: ``event``, ``id`` and the JSON ``data``; comments as ``comment``."""
    event, event_id, comment = "message", None, False
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data or comment:
                yield Frame(
                    event, event_id, json.loads("\n".join(data)) if data else None, comment and not data
                )
            event, event_id, data, comment = "message", None, [], False
            continue
        if line.startswith(":"):
            comment = True
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            event = value
        elif field == "id":
            event_id = value
        elif field == "data":
            data.append(value)


async def collect(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], *, stop_after: int | None = None
) -> tuple[list[Frame], int]:
    """The stream's frames up to its ``end`` (or the first ``stop_after`` progress frames), and the status."""
    got: list[Frame] = []
    async with client.stream("GET", url, headers=headers) as response:
        if response.status_code != 200:
            return got, response.status_code
        async for frame in frames(response):
            got.append(frame)
            if frame.event == "end":
                break
            if stop_after is not None and sum(f.event == "progress" for f in got) >= stop_after:
                break
        return got, 200

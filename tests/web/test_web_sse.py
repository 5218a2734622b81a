"""``GET /runs/{id}/events``: a live stream against a real uvicorn, resumed with ``Last-Event-ID``."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from sse_client import Frame, collect, frames
from web_support import WebRig, auth, live_server, wait_for


def start_gated(client: httpx.Client, web_rig: WebRig, keys: list[str]) -> tuple[str, Any]:
    gate = web_rig.gate()
    response = client.post(
        "/runs",
        json={"runnable": "web.gated", "input": {"gate": str(gate), "keys": keys}},
        headers=auth("all"),
    )
    assert response.status_code == 202, response.text
    return response.json()["id"], gate


def progress_ids(frames: list[Any]) -> list[int]:
    return [int(frame.id) for frame in frames if frame.event == "progress"]


async def test_a_stream_follows_the_run_live_then_ends_with_its_status(web_rig: WebRig) -> None:
    with live_server(web_rig.web()) as base, httpx.Client(base_url=base) as client:
        run_id, gate = start_gated(client, web_rig, ["a", "b"])
        async with httpx.AsyncClient(base_url=base, timeout=30) as stream_client:
            first, status = await collect(stream_client, f"/runs/{run_id}/events", auth("read"), stop_after=1)
            assert status == 200 and first[0].event == "progress"
            wait_for(
                lambda: (
                    {e["path"] for _, e in web_rig.store.events(run_id)}
                    >= {"pipeline/0/branch/a", "pipeline/0/branch/b"}
                )
            )
            gate.touch()
            frames, _ = await collect(stream_client, f"/runs/{run_id}/events", auth("read"))

    ids = progress_ids(frames)
    assert ids == [event_id for event_id, _ in web_rig.store.events(run_id)]  # the store's ids, all, in order
    assert frames[-1].event == "end" and frames[-1].data["status"] == "succeeded"
    assert frames[-1].data["result"] == {"count": 2, "done": ["a", "b"]}
    branch_statuses = [
        f.data["status"] for f in frames if f.event == "progress" and f.data["path"] == "pipeline/0/branch/a"
    ]
    assert branch_statuses[0] == "started" and branch_statuses[-1] == "completed"


async def test_last_event_id_resumes_after_the_last_event_seen(web_rig: WebRig) -> None:
    with live_server(web_rig.web()) as base, httpx.Client(base_url=base) as client:
        run_id, gate = start_gated(client, web_rig, ["a", "b", "c"])
        async with httpx.AsyncClient(base_url=base, timeout=30) as stream_client:
            wait_for(lambda: len(web_rig.store.events(run_id)) >= 4, what="a few events")
            head, _ = await collect(stream_client, f"/runs/{run_id}/events", auth("read"), stop_after=3)
            gate.touch()
            seen = progress_ids(head)[-1]
            tail, _ = await collect(
                stream_client, f"/runs/{run_id}/events", {**auth("read"), "Last-Event-ID": str(seen)}
            )
            from_query, _ = await collect(stream_client, f"/runs/{run_id}/events?after={seen}", auth("read"))
            done, status = await collect(
                stream_client,
                f"/runs/{run_id}/events",
                {**auth("read"), "Last-Event-ID": progress_ids(tail)[-1].__str__()},
            )

    everything = [event_id for event_id, _ in web_rig.store.events(run_id)]
    assert progress_ids(head) + progress_ids(tail) == everything  # nothing lost, nothing twice
    assert progress_ids(from_query) == progress_ids(tail)
    assert tail[-1].event == "end"
    assert (done, status) == ([], 204)  # an ended run with nothing new: an EventSource stops here


async def test_an_idle_stream_sends_keepalives_and_an_unknown_run_is_404(web_rig: WebRig) -> None:
    with live_server(web_rig.web(keepalive_seconds=0.2)) as base, httpx.Client(base_url=base) as client:
        run_id, gate = start_gated(client, web_rig, ["a"])
        async with httpx.AsyncClient(base_url=base, timeout=30) as stream_client:
            wait_for(lambda: any(e["path"] == "pipeline/0/branch/a" for _, e in web_rig.store.events(run_id)))
            async with stream_client.stream(
                "GET", f"/runs/{run_id}/events", headers=auth("read")
            ) as response:
                text = ""
                async for chunk in response.aiter_text():
                    text += chunk
                    if ": keepalive" in text:
                        break
            gate.touch()
            missing = await stream_client.get("/runs/no-such-run/events", headers=auth("read"))
            bad = await stream_client.get(
                f"/runs/{run_id}/events", headers={**auth("read"), "Last-Event-ID": "x"}
            )
        await asyncio.sleep(0)

    assert ": keepalive" in text and text.startswith("retry: 2000")
    assert response.headers["content-type"].startswith("text/event-stream")
    assert missing.status_code == 404 and bad.status_code == 422


async def test_a_client_that_leaves_gives_its_follower_and_stream_slot_back_at_once(web_rig: WebRig) -> None:
    app = web_rig.web(keepalive_seconds=60)
    service = app.state.web.service
    with live_server(app) as base, httpx.Client(base_url=base) as client:
        run_id, gate = start_gated(client, web_rig, ["a"])
        async with httpx.AsyncClient(base_url=base, timeout=30) as stream_client:
            head, _ = await collect(stream_client, f"/runs/{run_id}/events", auth("read"), stop_after=1)
            assert head  # the client read one event, then closed its connection
            wait_for(
                lambda: service.hub.feeds == 0 and service.slots.open == 0,
                timeout=5,
                what="the follower to leave",
            )
        gate.touch()


async def test_a_client_resuming_while_another_follows_gets_exactly_the_events_after_its_id(
    web_rig: WebRig,
) -> None:
    with live_server(web_rig.web()) as base, httpx.Client(base_url=base) as client:
        run_id, gate = start_gated(client, web_rig, ["a", "b", "c"])
        url = f"/runs/{run_id}/events"
        async with (
            httpx.AsyncClient(base_url=base, timeout=30) as follower_client,
            httpx.AsyncClient(base_url=base, timeout=30) as resumer_client,
        ):
            following = asyncio.Event()
            follower_frames: list[Frame] = []

            async def follow() -> None:
                async with follower_client.stream("GET", url, headers=auth("read")) as response:
                    async for frame in frames(response):
                        follower_frames.append(frame)
                        following.set()
                        if frame.event == "end":
                            return

            follower = asyncio.create_task(follow())
            await asyncio.wait_for(following.wait(), 30)  # the run's poller serves the follower
            wait_for(lambda: len(web_rig.store.events(run_id)) >= 4, what="a few events")
            seen = web_rig.store.events(run_id)[1][0]
            resuming = asyncio.create_task(
                collect(resumer_client, url, {**auth("read"), "Last-Event-ID": str(seen)})
            )
            await asyncio.sleep(0.2)  # not a verdict: lets the resumer join before the run goes on
            gate.touch()
            resumed, status = await asyncio.wait_for(resuming, 60)
            await asyncio.wait_for(follower, 60)

    everything = [event_id for event_id, _ in web_rig.store.events(run_id)]
    assert status == 200
    assert progress_ids(resumed) == [event_id for event_id in everything if event_id > seen]
    assert progress_ids(follower_frames) == everything
    assert resumed[-1].event == follower_frames[-1].event == "end"

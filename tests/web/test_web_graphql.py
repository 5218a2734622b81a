"""The GraphQL schema: queries and mutations through Strawberry's test client, the subscription
through Strawberry's own ``subscribe`` and through a real WebSocket client against uvicorn."""

from __future__ import annotations

import json
from typing import Any

import pytest
import websockets
from starlette.testclient import TestClient
from strawberry.asgi.test import GraphQLTestClient
from web_support import WebRig, auth, live_server, wait_for

from agentloop.orchestration.web.auth import Principal
from agentloop.orchestration.web.schema import build_schema

START = """mutation Start($runnable: String!, $input: JSON, $runId: String, $budget: Long) {
  startRun(runnable: $runnable, input: $input, runId: $runId, tokenBudget: $budget) { id status runnable }
}"""
RUN = (
    "query Run($id: String!) { run(id: $id) { id status finished result error input usage { totalTokens } } }"
)
PROGRESS = """subscription Follow($id: String!, $after: Long! = 0) {
  runProgress(id: $id, afterId: $after) {
    __typename
    ... on RunEvent { id path runnable status iteration maxIterations message }
    ... on RunEnd { status run { result } }
  }
}"""


def graphql(client: TestClient) -> GraphQLTestClient:
    return GraphQLTestClient(client, url="/graphql")


def codes(response: Any) -> list[str]:
    return [error["extensions"]["code"] for error in response.errors or ()]


def test_start_run_then_read_it_list_it_and_see_the_runnables(web_rig: WebRig) -> None:
    with TestClient(web_rig.web()) as client:
        gql = graphql(client)
        started = gql.query(
            START, {"runnable": "web.echo", "input": {"q": 1}, "budget": 2**40}, headers=auth("start")
        ).data
        run_id = started["startRun"]["id"]
        run = wait_for(
            lambda: (
                (gql.query(RUN, {"id": run_id}, headers=auth("read")).data["run"] or {}).get("finished")
                and gql.query(RUN, {"id": run_id}, headers=auth("read")).data["run"]
            )
        )
        listed = gql.query(
            '{ runs(filter: {runnable: "web.echo"}, page: {limit: 1}) { id runnable } }', headers=auth("read")
        ).data["runs"]
        runnables = gql.query("{ runnables { name kind declared } }", headers=auth("read")).data["runnables"]
        graph = gql.query('{ runnable(name: "web.gated") { kind mermaid graph } }', headers=auth("read")).data

    assert started["startRun"]["status"] == "pending" and started["startRun"]["runnable"] == "web.echo"
    assert run["status"] == "succeeded" and run["result"] == {"echo": {"q": 1}} and run["input"] == {"q": 1}
    assert listed == [{"id": run_id, "runnable": "web.echo"}]
    assert {"name": "web.gated", "kind": "pipeline", "declared": True} in runnables
    assert graph["runnable"]["kind"] == "pipeline" and "GatedFan" in graph["runnable"]["mermaid"]
    assert [child["label"] for child in graph["runnable"]["graph"]["children"]] == ["GatedFan", "Tally"]


def test_refusals_are_errors_with_codes(web_rig: WebRig) -> None:
    with TestClient(web_rig.web()) as client:
        gql = graphql(client)
        forbidden = gql.query(START, {"runnable": "web.echo"}, headers=auth("read"), assert_no_errors=False)
        unknown = gql.query(START, {"runnable": "no.such"}, headers=auth("start"), assert_no_errors=False)
        missing = gql.query(RUN, {"id": "no-such-run"}, headers=auth("read"))
        cancel = gql.query(
            'mutation { cancelRun(id: "no-such-run") { id } }', headers=auth("cancel"), assert_no_errors=False
        )
        hidden = gql.query(RUN, {"id": "no-such-run"}, headers=auth("start"))
        aliases = "{ " + " ".join(f"a{n}: runnables {{ name }}" for n in range(16)) + " }"
        too_many = gql.query(aliases, headers=auth("read"), assert_no_errors=False)
        anonymous = client.post("/graphql", json={"query": "{ runnables { name } }"})
        via_get = client.get("/graphql", params={"query": "{ runnables { name } }"}, headers=auth("read"))

    assert codes(forbidden) == ["FORBIDDEN"] and codes(unknown) == ["BAD_USER_INPUT"]
    assert missing.data == {"run": None} and hidden.data == {"run": None}
    assert codes(cancel) == ["NOT_FOUND"]
    assert too_many.errors and "aliases" in too_many.errors[0]["message"].lower()
    assert anonymous.status_code == 401
    assert via_get.status_code == 405


async def test_the_subscription_streams_events_then_the_end_through_strawberry(web_rig: WebRig) -> None:
    app = web_rig.web()
    service = app.state.web.service
    gate = web_rig.gate()
    view, _ = await service.start(
        Principal(name="t", scopes=frozenset({"start"})),
        {"runnable": "web.gated", "input": {"gate": str(gate), "keys": ["x", "y"]}},
    )
    context = {"service": service, "principal": Principal(name="t", scopes=frozenset({"read"}))}
    stream = await build_schema().subscribe(
        PROGRESS, variable_values={"id": view["id"]}, context_value=context
    )
    items: list[dict[str, Any]] = []
    async for result in stream:  # type: ignore[union-attr]
        assert result.errors is None, result.errors
        items.append(result.data["runProgress"])
        if len(items) == 1:
            gate.touch()
    await service.hub.close()

    assert items[0]["__typename"] == "RunEvent" and items[0]["path"] == ""
    assert items[-1] == {
        "__typename": "RunEnd",
        "status": "succeeded",
        "run": {"result": {"count": 2, "done": ["x", "y"]}},
    }
    events = [item for item in items if item["__typename"] == "RunEvent"]
    assert [int(item["id"]) for item in events] == [
        event_id for event_id, _ in web_rig.store.events(view["id"])
    ]
    assert {"pipeline/0/branch/x", "pipeline/0/branch/y"} <= {item["path"] for item in events}


async def test_the_subscription_over_a_real_websocket(web_rig: WebRig) -> None:
    app = web_rig.web()
    with live_server(app) as base, TestClient(app) as client:
        gate = web_rig.gate()
        started = (
            graphql(client)
            .query(
                START,
                {"runnable": "web.gated", "input": {"gate": str(gate), "keys": ["p", "q"]}},
                headers=auth("all"),
            )
            .data["startRun"]
        )
        url = base.replace("http://", "ws://") + "/graphql"
        async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as socket:  # type: ignore[list-item]
            await socket.send(json.dumps({"type": "connection_init", "payload": auth("read")}))
            assert json.loads(await socket.recv())["type"] == "connection_ack"
            await socket.send(
                json.dumps(
                    {
                        "id": "1",
                        "type": "subscribe",
                        "payload": {"query": PROGRESS, "variables": {"id": started["id"]}},
                    }
                )
            )
            messages = []
            while True:
                message = json.loads(await socket.recv())
                if message["type"] == "ping":
                    await socket.send(json.dumps({"type": "pong"}))
                    continue
                messages.append(message)
                if len(messages) == 1:
                    gate.touch()
                if message["type"] in ("complete", "error"):
                    break

    items = [m["payload"]["data"]["runProgress"] for m in messages if m["type"] == "next"]
    assert messages[-1] == {"id": "1", "type": "complete"}
    assert items[-1]["__typename"] == "RunEnd" and items[-1]["status"] == "succeeded"
    statuses = [
        i["status"] for i in items if i["__typename"] == "RunEvent" and i["path"] == "pipeline/0/branch/p"
    ]
    assert statuses[0] == "started" and statuses[-1] == "completed"


@pytest.mark.parametrize(
    "payload", [{}, {"Authorization": "Bearer wrong-token-wrong-token"}], ids=["none", "wrong"]
)
async def test_a_websocket_without_a_valid_token_is_closed(web_rig: WebRig, payload: dict[str, str]) -> None:
    with live_server(web_rig.web()) as base:
        url = base.replace("http://", "ws://") + "/graphql"
        async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as socket:  # type: ignore[list-item]
            await socket.send(json.dumps({"type": "connection_init", "payload": payload}))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await socket.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403


async def test_a_websocket_from_a_page_of_another_origin_is_refused(web_rig: WebRig) -> None:
    with live_server(web_rig.web()) as base:
        url = base.replace("http://", "ws://") + "/graphql"
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(
                url,
                subprotocols=["graphql-transport-ws"],
                additional_headers={"Origin": "https://evil.example"},  # type: ignore[list-item]
            )
        same_origin = await websockets.connect(
            url,
            subprotocols=["graphql-transport-ws"],
            additional_headers={"Origin": base},  # type: ignore[list-item]
        )
        await same_origin.close()
    assert refused.value.response.status_code == 403

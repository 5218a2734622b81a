"""Runs belong to the principal whose token started them: a token reads, follows, lists and cancels
its own runs only, unless it holds ``admin``; any other run answers as one that does not exist.

``shop`` and ``other`` are tokens naming no principal (each is its own); ``admin`` is a bare
token (every scope, ``admin`` included). Answering a paused run is in ``tests/human/test_human_web.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.testclient import TestClient
from strawberry.asgi.test import GraphQLTestClient
from web_support import WebRig, wait_for

from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.settings.http import parse_tokens
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.web.auth import Principal
from agentloop.orchestration.web.schema import build_schema

TOKENS = {
    "shop": "shop-token-0123456789abcdef",
    "other": "other-token-0123456789abcde",
    "admin": "admin-token-0123456789abcde",
}
GRANTS = f"{TOKENS['shop']}:read+start+cancel,{TOKENS['other']}:read+start+cancel,{TOKENS['admin']}"
RUN = "query Run($id: String!) { run(id: $id) { id status } }"
OWNER = "query Run($id: String!) { run(id: $id) { principal } }"
RUNS = '{ runs(filter: {runnable: "web.echo"}, page: {limit: 200}) { id } }'
CANCEL = "mutation Cancel($id: String!) { cancelRun(id: $id) { id cancelRequested } }"


def web(web_rig: WebRig, **http: Any) -> Starlette:
    return web_rig.web(tokens=parse_tokens(http.pop("grants", GRANTS)), **http)


def as_(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS.get(name, name)}"}


def start(client: TestClient, name: str, runnable: str = "web.echo", **fields: Any) -> str:
    response = client.post("/runs", json={"runnable": runnable, "input": 1, **fields}, headers=as_(name))
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def finished(client: TestClient, run_id: str, name: str) -> dict[str, Any]:
    return wait_for(
        lambda: (view := client.get(f"/runs/{run_id}", headers=as_(name)).json()).get("finished") and view,
        what=f"run {run_id} to end",
    )


def codes(response: Any) -> list[str]:
    return [error["extensions"]["code"] for error in response.errors or ()]


def test_a_token_reads_and_follows_only_its_own_runs_and_an_admin_every_run(web_rig: WebRig) -> None:
    with TestClient(web(web_rig)) as client:
        run_id = start(client, "shop")
        own = finished(client, run_id, "shop")
        foreign = client.get(f"/runs/{run_id}", headers=as_("other"))
        missing = client.get("/runs/no-such-run", headers=as_("other"))
        foreign_events = client.get(f"/runs/{run_id}/events", headers=as_("other"))
        resumed = client.get(f"/runs/{run_id}/events", headers={**as_("other"), "Last-Event-ID": "999999999"})
        with client.stream("GET", f"/runs/{run_id}/events", headers=as_("shop")) as stream:
            own_events = "".join(stream.iter_text())
        admin = client.get(f"/runs/{run_id}", headers=as_("admin")).json()
        gql = GraphQLTestClient(client, url="/graphql")
        by_other = gql.query(RUN, {"id": run_id}, headers=as_("other")).data
        by_shop = gql.query(RUN, {"id": run_id}, headers=as_("shop")).data
        by_admin = gql.query(OWNER, {"id": run_id}, headers=as_("admin"), assert_no_errors=False).data

    assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "NOT_FOUND"
    # refused in the very words of a run that does not exist: the id's existence is not told
    assert foreign.json()["error"]["message"] == missing.json()["error"]["message"].replace(
        "no-such-run", run_id
    )
    assert foreign_events.status_code == 404 and resumed.status_code == 404  # not 204: "it has ended"
    assert by_other == {"run": None}
    assert "event: end" in own_events and by_shop["run"]["id"] == run_id
    assert own["status"] == "succeeded" and own["principal"].startswith("token-")
    assert admin["status"] == "succeeded" and admin["principal"] == own["principal"]
    assert by_admin == {"run": {"principal": own["principal"]}}


def test_a_token_cancels_only_its_own_runs_and_an_admin_any(web_rig: WebRig) -> None:
    gate = web_rig.gate()
    with TestClient(web(web_rig)) as client:
        gql = GraphQLTestClient(client, url="/graphql")
        run_id = start(client, "shop", "web.gated", input={"gate": str(gate), "keys": ["a"]})
        wait_for(lambda: (record := web_rig.store.get_run(run_id)) and record.status == "running")
        refused = client.post(f"/runs/{run_id}/cancel", json={}, headers=as_("other"))
        refused_gql = gql.query(CANCEL, {"id": run_id}, headers=as_("other"), assert_no_errors=False)
        untouched = web_rig.store.get_run(run_id)
        own_gql = gql.query(CANCEL, {"id": run_id}, headers=as_("shop")).data
        by_admin = client.post(f"/runs/{run_id}/cancel", json={}, headers=as_("admin"))
        gate.touch()
        finished(client, run_id, "shop")

    assert refused.status_code == 404 and refused.json()["error"]["code"] == "NOT_FOUND"
    assert codes(refused_gql) == ["NOT_FOUND"]
    assert untouched is not None and untouched.cancel_requested is False
    assert own_gql["cancelRun"] == {"id": run_id, "cancelRequested": True}
    assert by_admin.status_code == 200 and by_admin.json()["cancel_requested"] is True


def test_listing_shows_a_token_only_its_own_runs_unless_admin(web_rig: WebRig) -> None:
    with TestClient(web(web_rig)) as client:
        mine, theirs = start(client, "shop"), start(client, "other")
        finished(client, mine, "shop"), finished(client, theirs, "other")
        listed = {
            name: {view["id"] for view in client.get("/runs?limit=200", headers=as_(name)).json()["runs"]}
            for name in TOKENS
        }
        gql = GraphQLTestClient(client, url="/graphql")
        listed_gql = {
            name: {run["id"] for run in gql.query(RUNS, headers=as_(name)).data["runs"]} for name in TOKENS
        }

    for found in (listed, listed_gql):
        assert mine in found["shop"] and theirs not in found["shop"]
        assert theirs in found["other"] and mine not in found["other"]
        assert {mine, theirs} <= found["admin"]


def test_runs_started_outside_http_reach_only_admin_tokens(web_rig: WebRig) -> None:
    handle = CeleryAgentRunner.create(runnable="web.echo", app=web_rig.app, store=web_rig.store).request_sync(
        input=2
    )
    with TestClient(web(web_rig)) as client:
        view = finished(client, handle.run_id, "admin")
        refused = {
            name: client.get(f"/runs/{handle.run_id}", headers=as_(name)).status_code for name in TOKENS
        }
        listed = {view["id"] for view in client.get("/runs?limit=200", headers=as_("shop")).json()["runs"]}

    assert refused == {"shop": 404, "other": 404, "admin": 200}
    assert handle.run_id not in listed
    assert view["status"] == "succeeded" and view["principal"] is None


def test_a_run_id_another_principal_took_is_refused_without_saying_whose(web_rig: WebRig) -> None:
    run_id = f"owned-{uuid.uuid4().hex}"
    with TestClient(web(web_rig)) as client:
        start(client, "shop", run_id=run_id)
        finished(client, run_id, "shop")
        again = client.post(
            "/runs", json={"runnable": "web.echo", "input": 1, "run_id": run_id}, headers=as_("shop")
        )
        taken = client.post(
            "/runs", json={"runnable": "web.echo", "input": 1, "run_id": run_id}, headers=as_("other")
        )
        admin = client.post(
            "/runs", json={"runnable": "web.echo", "input": 1, "run_id": run_id}, headers=as_("admin")
        )

    assert again.status_code == 200 and again.json()["id"] == run_id
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "CONFLICT"
    assert "web.echo" not in taken.text and "token-" not in taken.text
    assert admin.status_code == 200 and admin.json()["id"] == run_id


def test_a_run_launched_here_and_not_yet_recorded_is_its_starters_only(web_rig: WebRig) -> None:
    # this server reads a store no worker writes to: its runs stay pending, known only from the launch
    with TestClient(web(web_rig, store=InMemoryRunStore())) as client:
        run_id = start(client, "shop")
        own = client.get(f"/runs/{run_id}", headers=as_("shop"))
        foreign = client.get(f"/runs/{run_id}", headers=as_("other"))
        admin = client.get(f"/runs/{run_id}", headers=as_("admin"))

    assert (own.status_code, foreign.status_code, admin.status_code) == (200, 404, 200)
    assert own.json()["status"] == "pending" and own.json()["principal"].startswith("token-")


def test_tokens_naming_one_principal_share_its_runs(web_rig: WebRig) -> None:
    one, two, other = "svc-token-one-0123456789", "svc-token-two-0123456789", "else-token-0123456789ab"
    grants = f"{one}:read+start:svc,{two}:read:svc,{other}:read"
    with TestClient(web(web_rig, grants=grants)) as client:
        run_id = start(client, one)
        view = finished(client, run_id, two)
        foreign = client.get(f"/runs/{run_id}", headers=as_(other))

    assert view["principal"] == "svc" and view["status"] == "succeeded"
    assert foreign.status_code == 404


async def test_a_subscription_to_another_principals_run_is_refused(web_rig: WebRig) -> None:
    app = web(web_rig)
    service = app.state.web.service
    view, _ = await service.start(
        Principal(name="shop", scopes=frozenset({"start"})), {"runnable": "web.echo"}
    )
    schema = build_schema()
    follow = "subscription($id: String!) { runProgress(id: $id) { __typename } }"
    answers = {}
    for name, scopes in (("other", {"read"}), ("shop", {"read"}), ("ops", {"read", "admin"})):
        context = {"service": service, "principal": Principal(name=name, scopes=frozenset(scopes))}
        stream = await schema.subscribe(follow, variable_values={"id": view["id"]}, context_value=context)
        first = await anext(stream)  # type: ignore[arg-type]
        answers[name] = [error.extensions["code"] for error in first.errors or ()] or first.data
        await stream.aclose()  # type: ignore[union-attr]
    await service.hub.close()

    assert answers["other"] == ["NOT_FOUND"]
    assert answers["shop"] == answers["ops"] == {"runProgress": {"__typename": "RunEvent"}}

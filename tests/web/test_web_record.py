"""``record`` over HTTP: REST's field and GraphQL's argument reach the worker, which records the
run (its context spec first); anything but a boolean is refused with a clear error."""

from __future__ import annotations

import json

from starlette.testclient import TestClient
from strawberry.asgi.test import GraphQLTestClient
from web_support import WebRig, auth, wait_for

from agentloop.actions.recording import RUN
from agentloop.orchestration.store.recordings import recording_store_for


def recorded_kinds(web_rig: WebRig, run_id: str) -> list[str]:
    recordings = recording_store_for(web_rig.store)
    assert recordings is not None
    return [entry.kind for entry in recordings.entries(run_id)]


def test_a_run_started_with_record_over_rest_or_graphql_is_recorded_and_one_without_is_not(
    web_rig: WebRig,
) -> None:
    mutation = 'mutation { startRun(runnable: "web.echo", input: 2, record: true) { id } }'
    with TestClient(web_rig.web()) as client:
        recorded = client.post(
            "/runs", json={"runnable": "web.echo", "input": 1, "record": True}, headers=auth("all")
        ).json()["id"]
        plain = client.post("/runs", json={"runnable": "web.echo", "input": 1}, headers=auth("all")).json()[
            "id"
        ]
        by_graphql = GraphQLTestClient(client, url="/graphql").query(mutation, headers=auth("all")).data
        for run_id in (recorded, plain, by_graphql["startRun"]["id"]):
            wait_for(lambda run_id=run_id: (r := web_rig.store.get_run(run_id)) is not None and r.is_finished)

    assert recorded_kinds(web_rig, recorded) == [RUN]
    assert recorded_kinds(web_rig, by_graphql["startRun"]["id"]) == [RUN]
    assert recorded_kinds(web_rig, plain) == []


def test_a_record_that_is_not_a_boolean_is_refused(web_rig: WebRig) -> None:
    body = {"runnable": "web.echo", "record": "yes"}
    with TestClient(web_rig.web()) as client:
        response = client.post(
            "/runs", content=json.dumps(body), headers={**auth("all"), "Content-Type": "application/json"}
        )
    assert response.status_code == 422
    assert "record must be true or false" in response.json()["error"]["message"]

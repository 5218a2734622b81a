"""What the HTTP fronts say of a run's values: a ``null`` result is ``null`` (never ``"None"``), over
REST and GraphQL, with or without the read scope; a started run is answered with the input it took."""

from __future__ import annotations

import uuid

from starlette.testclient import TestClient
from strawberry.asgi.test import GraphQLTestClient
from web_support import WebRig, auth

RUN = "query Run($id: String!) { run(id: $id) { id status result input } }"


def a_run_that_returned_null(web_rig: WebRig) -> str:
    run_id = f"null-{uuid.uuid4().hex}"
    web_rig.store.create_run(run_id=run_id, runnable="web.echo", input=None, principal="web-tests")
    web_rig.store.finish_run(run_id, status="succeeded", output=None)
    return run_id


def test_a_null_result_is_null_over_rest_and_graphql_for_every_caller(web_rig: WebRig) -> None:
    run_id = a_run_that_returned_null(web_rig)
    with TestClient(web_rig.web()) as client:
        gql = GraphQLTestClient(client, url="/graphql")
        rest = {
            token: client.get(f"/runs/{run_id}", headers=auth(token)).json() for token in ("read", "start")
        }
        graph = {
            token: gql.query(RUN, {"id": run_id}, headers=auth(token)).data["run"]
            for token in ("read", "start")
        }

    for token in ("read", "start"):
        assert (rest[token]["result"], rest[token]["input"]) == (None, None), token
        assert (graph[token]["result"], graph[token]["input"]) == (None, None), token


def test_post_runs_answers_with_the_input_it_accepted(web_rig: WebRig) -> None:
    with TestClient(web_rig.web()) as client:
        reader = client.post(
            "/runs", json={"runnable": "web.echo", "input": {"q": [1, 2]}}, headers=auth("all")
        )
        starter = client.post(
            "/runs", json={"runnable": "web.echo", "input": {"q": 3}}, headers=auth("start")
        )

    assert reader.status_code == 202 and reader.json()["input"] == {"q": [1, 2]}
    assert starter.status_code == 202 and starter.json()["input"] == "<hidden dict 8 chars>"  # no read scope

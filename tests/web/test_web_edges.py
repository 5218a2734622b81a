"""Issue 21 on the web fronts: every GraphQL error carries a code, deep variables are a clear 4xx
(never a 500) on both fronts, and a start that names an existing run with other arguments is a 409."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient
from web_support import WebRig, auth, wait_for

DEEP = 100_000


def deep_json(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def test_deep_variables_are_a_clear_4xx_on_both_fronts(web_rig: WebRig) -> None:
    graphql_body = (
        '{"query": "mutation S($i: JSON) { startRun(runnable: \\"web.echo\\", input: $i) { id } }",'
        f' "variables": {{"i": {deep_json(DEEP)}}}}}'
    )
    rest_body = f'{{"runnable": "web.echo", "input": {deep_json(DEEP)}}}'
    headers = {**auth("all"), "Content-Type": "application/json"}
    with TestClient(web_rig.web(), raise_server_exceptions=False) as client:
        graphql = client.post("/graphql", content=graphql_body, headers=headers)
        rest = client.post("/runs", content=rest_body, headers=headers)

    assert rest.status_code == 422 and rest.json()["error"]["code"] == "BAD_USER_INPUT"
    assert graphql.status_code == 422, graphql.text
    assert graphql.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert "nested" in graphql.json()["errors"][0]["message"]


def test_variables_deeper_than_the_input_limit_are_refused_before_they_are_used(web_rig: WebRig) -> None:
    query = 'mutation S($i: JSON) { startRun(runnable: "web.echo", input: $i) { id } }'
    body = json.dumps({"query": query, "variables": {"i": json.loads(deep_json(65))}})
    headers = {**auth("all"), "Content-Type": "application/json"}
    with TestClient(web_rig.web()) as client:
        refused = client.post("/graphql", content=body, headers=headers)

    assert refused.status_code == 422
    assert refused.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


REFUSED_DOCUMENTS = {
    "a syntax error": ("{ runnables { name }", "GRAPHQL_PARSE_FAILED"),
    "an unknown field": ("{ runnables { colour } }", "GRAPHQL_VALIDATION_FAILED"),
    "too many tokens": ("{ " + "runnables { name } " * 300 + "}", "GRAPHQL_PARSE_FAILED"),
    "too many aliases": (
        "{ " + " ".join(f"a{i}: runnables {{ name }}" for i in range(20)) + " }",
        "GRAPHQL_VALIDATION_FAILED",
    ),
    "not a JSON body": (None, "BAD_USER_INPUT"),
}


@pytest.mark.parametrize(("document", "code"), REFUSED_DOCUMENTS.values(), ids=REFUSED_DOCUMENTS.keys())
def test_every_graphql_error_carries_a_code(web_rig: WebRig, document: str | None, code: str | None) -> None:
    headers = {**auth("all"), "Content-Type": "application/json"}
    body = "{not json" if document is None else json.dumps({"query": document})
    with TestClient(web_rig.web(), raise_server_exceptions=False) as client:
        response = client.post("/graphql", content=body, headers=headers)

    assert 400 <= response.status_code < 500 or response.status_code == 200, response.text
    errors = response.json()["errors"]
    assert errors and all(error.get("extensions", {}).get("code") for error in errors), errors
    if code is not None:
        assert {error["extensions"]["code"] for error in errors} == {code}


def _finished(client: TestClient, run_id: str) -> Any:
    view = client.get(f"/runs/{run_id}", headers=auth("read")).json()
    return view if view.get("finished") else None


START = """mutation S($runId: String, $input: JSON) {
  startRun(runnable: "web.echo", input: $input, runId: $runId) { id }
}"""


def test_a_start_with_an_existing_run_id_and_another_input_is_a_conflict(web_rig: WebRig) -> None:
    run_id = f"web-{uuid.uuid4().hex}"
    with TestClient(web_rig.web()) as client:
        first = client.post(
            "/runs", json={"runnable": "web.echo", "input": 1, "run_id": run_id}, headers=auth("all")
        )
        wait_for(lambda: _finished(client, run_id), what="the run to end")
        same = client.post(
            "/runs", json={"runnable": "web.echo", "input": 1, "run_id": run_id}, headers=auth("all")
        )
        other = client.post(
            "/runs", json={"runnable": "web.echo", "input": 2, "run_id": run_id}, headers=auth("all")
        )
        graphql = client.post(
            "/graphql", json={"query": START, "variables": {"runId": run_id, "input": 2}}, headers=auth("all")
        )
        result = _finished(client, run_id)["result"]

    assert first.status_code == 202 and same.status_code == 200
    assert other.status_code == 409 and other.json()["error"]["code"] == "CONFLICT"
    assert "other arguments" in other.json()["error"]["message"]
    assert graphql.json()["errors"][0]["extensions"]["code"] == "CONFLICT"
    assert result == {"echo": 1}  # the first input stands; the other one was refused, not dropped

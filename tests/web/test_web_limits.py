"""Input limits: body size, JSON depth, identifiers, fields, pages, budgets, open streams."""

from __future__ import annotations

import json

import pytest
from starlette.exceptions import HTTPException
from starlette.testclient import TestClient
from web_support import WebRig, auth

from agentloop.orchestration.web.request_limits import MAX_JSON_DEPTH, check_json


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_a_body_over_the_limit_is_refused_before_it_is_read(web_rig: WebRig) -> None:
    with TestClient(web_rig.web(max_body_bytes=512)) as client:
        big = {"runnable": "web.echo", "input": "x" * 600}
        declared = client.post("/runs", json=big, headers=auth("all"))
        streamed = client.post(
            "/runs",
            content=(chunk for chunk in [b'{"runnable": "web.echo", "input": "', b"x" * 600, b'"}']),
            headers={**auth("all"), "Content-Type": "application/json"},
        )
        small = client.post("/runs", json={"runnable": "web.echo", "input": "x"}, headers=auth("all"))
        graphql = client.post(
            "/graphql", json={"query": "{ runnables { name } }", "pad": "x" * 600}, headers=auth("all")
        )

    assert declared.status_code == 413 and declared.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert streamed.status_code == 413
    assert graphql.status_code == 413
    assert small.status_code == 202


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"runnable": "web.echo", "input": nested(MAX_JSON_DEPTH + 1)}, "nested more than"),
        ({"runnable": "web.echo", "context": []}, "context must be a JSON object"),
        ({"runnable": "web.echo", "inputs": 1}, "unknown field"),
        ({"runnable": "no.such.runnable"}, "unknown runnable"),
        ({"runnable": "web.echo", "run_id": "a b"}, "run_id must be"),
        ({"runnable": "web.echo", "run_id": "x" * 201}, "run_id must be"),
        ({"runnable": "web.echo", "token_budget": -1}, "token_budget"),
        ({"runnable": "web.echo", "token_budget": 2**63}, "token_budget"),
        ({"runnable": "web.echo", "token_budget": True}, "token_budget"),
        ({"runnable": "web.echo", "input": "nul\u0000byte"}, "NUL"),
        ({"runnable": ["web.echo"]}, "runnable must be"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_a_malformed_start_is_refused_with_a_clear_error(web_rig: WebRig, body: object, message: str) -> None:
    with TestClient(web_rig.web()) as client:
        response = client.post(
            "/runs", content=json.dumps(body), headers={**auth("all"), "Content-Type": "application/json"}
        )
    assert response.status_code == 422, response.text
    assert (
        response.json()["error"]["code"] == "BAD_USER_INPUT"
        and message in response.json()["error"]["message"]
    )


def test_json_deeper_than_python_can_parse_is_refused_too(web_rig: WebRig) -> None:
    with TestClient(web_rig.web(max_body_bytes=100_000)) as client:
        response = client.post(
            "/runs",
            content=b'{"runnable": "web.echo", "input": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            headers={**auth("all"), "Content-Type": "application/json"},
        )
    assert response.status_code == 422


@pytest.mark.parametrize("query", ["limit=201", "limit=-1", "offset=10001", "limit=x", "status=a%20b"])
def test_pages_and_filters_are_bounded(web_rig: WebRig, query: str) -> None:
    with TestClient(web_rig.web()) as client:
        assert client.get(f"/runs?{query}", headers=auth("read")).status_code == 422


def test_the_deepest_allowed_json_passes_the_check() -> None:
    assert check_json(nested(MAX_JSON_DEPTH - 1), what="input") is not None
    with pytest.raises(HTTPException, match="not a string"):
        check_json({"a": {1: 2}}, what="input")


def test_streams_over_the_limit_are_refused_with_503(web_rig: WebRig) -> None:
    app = web_rig.web(max_streams=1)
    with TestClient(app) as client:
        run_id = client.post("/runs", json={"runnable": "web.echo"}, headers=auth("all")).json()["id"]
        app.state.web.service.slots.open = 1  # one stream is open
        refused = client.get(f"/runs/{run_id}/events", headers=auth("read"))
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "UNAVAILABLE"

"""Closed by default: every route refuses without a token, scopes are enforced, contents need read."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient
from web_support import TOKENS, WebRig, auth, wait_for

#: The viewer's static files and the redirects to them hold no data.
PUBLIC = {"/", "/ui", "/ui/", "/ui/{name:str}"}


def data_routes(app: Any) -> list[tuple[str, str]]:
    found = []
    for route in app.routes:
        if isinstance(route, Route) and route.path not in PUBLIC:
            found += [(method, route.path) for method in sorted(route.methods or ()) if method != "HEAD"]
    return found


def concrete(path: str) -> str:
    return path.replace("{run_id:str}", "some-run").replace("{name:str}", "web.echo")


def test_every_data_route_is_listed(web_rig: WebRig) -> None:
    assert data_routes(web_rig.web()) == [
        ("POST", "/runs"),
        ("GET", "/runs"),
        ("GET", "/runs/{run_id:str}"),
        ("POST", "/runs/{run_id:str}/cancel"),
        ("GET", "/runnables"),
        ("GET", "/runnables/{name:str}/graph"),
        ("POST", "/runs/{run_id:str}/resume"),
        ("GET", "/runs/{run_id:str}/events"),
        ("POST", "/graphql"),
        ("GET", "/metrics"),
    ]


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer not-a-configured-token-xx"}, {"Authorization": "Basic dXNlcjpwYXNz"}],
)
def test_every_route_refuses_without_a_valid_token(web_rig: WebRig, headers: dict[str, str]) -> None:
    app = web_rig.web()
    with TestClient(app) as client:
        for method, path in data_routes(app):
            response = client.request(
                method, concrete(path), headers={**headers, "Content-Type": "application/json"}, content=b"{}"
            )
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"]["code"] == "UNAUTHENTICATED"
            assert response.headers["www-authenticate"].startswith("Bearer")


def test_nothing_is_open_when_no_token_is_configured(web_rig: WebRig) -> None:
    with TestClient(web_rig.web(tokens=())) as client:
        for name in TOKENS:
            assert client.get("/runs", headers=auth(name)).status_code == 401
        assert client.get("/runs").status_code == 401
        assert client.get("/ui/").status_code == 200  # the viewer's page itself holds no data


def test_each_scope_allows_only_its_own_actions(web_rig: WebRig) -> None:
    start = {"runnable": "web.echo", "input": {"secret": "the user's words"}}
    with TestClient(web_rig.web()) as client:
        refused_start = [
            client.post("/runs", json=start, headers=auth(name)).status_code for name in ("read", "cancel")
        ]
        run_id = client.post("/runs", json=start, headers=auth("start")).json()["id"]
        wait_for(lambda: client.get(f"/runs/{run_id}", headers=auth("read")).json()["finished"])
        refused_cancel = [
            client.post(f"/runs/{run_id}/cancel", json={}, headers=auth(name)).json()["error"]["code"]
            for name in ("read", "start")
        ]
        allowed_cancel = client.post(f"/runs/{run_id}/cancel", json={}, headers=auth("cancel")).status_code

    assert refused_start == [403, 403]
    assert refused_cancel == ["FORBIDDEN", "FORBIDDEN"]
    assert allowed_cancel == 409  # allowed, but the run has ended


def test_inputs_results_and_event_texts_only_for_the_read_scope(web_rig: WebRig) -> None:
    start = {"runnable": "web.echo", "input": {"secret": "the user's words"}}
    with TestClient(web_rig.web()) as client:
        run_id = client.post("/runs", json=start, headers=auth("start")).json()["id"]
        wait_for(lambda: client.get(f"/runs/{run_id}", headers=auth("read")).json()["finished"])
        hidden = client.get(f"/runs/{run_id}", headers=auth("start")).json()
        shown = client.get(f"/runs/{run_id}", headers=auth("read")).json()
        listed = client.get("/runs", headers=auth("cancel")).json()["runs"]
        with client.stream("GET", f"/runs/{run_id}/events", headers=auth("start")) as stream:
            hidden_events = "".join(stream.iter_text())

    assert shown["input"] == start["input"] and shown["result"] == {"echo": start["input"]}
    assert hidden["input"].startswith("<hidden dict") and hidden["result"].startswith("<hidden dict")
    assert (hidden["status"], hidden["runnable"], hidden["usage"]) == (
        shown["status"],
        "web.echo",
        shown["usage"],
    )
    assert all("the user's words" not in str(view) for view in listed)
    assert "the user's words" not in hidden_events and '"status":"completed"' in hidden_events


def test_anonymous_access_only_when_configured_and_a_wrong_token_never_falls_back(web_rig: WebRig) -> None:
    with TestClient(web_rig.web(anonymous_scopes="read")) as client:
        assert client.get("/runs").status_code == 200
        assert client.post("/runs", json={"runnable": "web.echo"}).status_code == 403
        assert (
            client.get("/runs", headers={"Authorization": "Bearer wrong-token-wrong-token"}).status_code
            == 401
        )


def test_cors_is_off_by_default_and_on_for_the_listed_origins_only(web_rig: WebRig) -> None:
    preflight = {
        "Origin": "https://shop.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    with TestClient(web_rig.web()) as client:
        closed = client.options("/runs", headers=preflight)
        plain = client.get("/runs", headers={**auth("read"), "Origin": "https://shop.example"})
    with TestClient(web_rig.web(cors_origins=("https://shop.example",))) as client:
        opened = client.options("/runs", headers=preflight)
        other = client.options("/runs", headers={**preflight, "Origin": "https://evil.example"})

    assert "access-control-allow-origin" not in closed.headers
    assert "access-control-allow-origin" not in plain.headers
    assert (
        opened.status_code == 200 and opened.headers["access-control-allow-origin"] == "https://shop.example"
    )
    assert "access-control-allow-origin" not in other.headers


def test_a_post_needs_a_json_content_type(web_rig: WebRig) -> None:
    with TestClient(web_rig.web()) as client:
        form = client.post(
            "/runs",
            content=b'{"runnable": "web.echo"}',
            headers={**auth("all"), "Content-Type": "text/plain"},
        )
    assert form.status_code == 415

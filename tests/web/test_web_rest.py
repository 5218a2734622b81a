"""Plain HTTP: start a run through the Celery app, read it, list runs, cancel, graphs."""

from __future__ import annotations

import time
import uuid
from typing import Any

from starlette.testclient import TestClient
from web_support import WebRig, auth, wait_for


def finished(client: TestClient, run_id: str) -> dict[str, Any] | None:
    view = client.get(f"/runs/{run_id}", headers=auth("read")).json()
    return view if view.get("finished") else None


def test_a_run_started_over_http_runs_on_the_worker_and_reads_back(web_rig: WebRig) -> None:
    with TestClient(web_rig.web()) as client:
        response = client.post(
            "/runs", json={"runnable": "web.echo", "input": {"hello": "world"}}, headers=auth("all")
        )
        assert response.status_code == 202, response.text
        started = response.json()
        assert started["status"] == "pending" and started["runnable"] == "web.echo"
        assert response.headers["location"] == f"/runs/{started['id']}"

        view = wait_for(lambda: finished(client, started["id"]), what="the run to end")

    assert view["status"] == "succeeded"
    assert view["input"] == {"hello": "world"}
    assert view["result"] == {"echo": {"hello": "world"}}
    assert view["stopped_by"] == "complete"  # its loop finished before its bound
    assert view["usage"] == {
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "cache_hits": 0,
        "cache_misses": 0,
        "tokens_saved": 0,
        "tool_calls": 0,
    }


def test_the_run_id_is_an_idempotency_key(web_rig: WebRig) -> None:
    run_id = f"web-{uuid.uuid4().hex}"
    request = {"runnable": "web.echo", "input": 1, "run_id": run_id}
    with TestClient(web_rig.web()) as client:
        first = client.post("/runs", json=request, headers=auth("all"))
        again = client.post("/runs", json=request, headers=auth("all"))
        other = client.post("/runs", json={**request, "runnable": "record_search.ask"}, headers=auth("all"))
        wait_for(lambda: finished(client, run_id), what="the run to end")
        after = client.post("/runs", json=request, headers=auth("all"))

    assert (first.status_code, again.status_code, after.status_code) == (202, 200, 200)
    assert {first.json()["id"], again.json()["id"], after.json()["id"]} == {run_id}
    assert other.status_code == 409 and other.json()["error"]["code"] == "CONFLICT"
    assert after.json()["status"] == "succeeded"
    assert len([r for r in web_rig.store.list_runs(limit=1000) if r.id == run_id]) == 1


def test_runs_are_listed_newest_first_and_filtered(web_rig: WebRig) -> None:
    with TestClient(web_rig.web()) as client:
        ids = []
        for n in range(3):  # one after the other: a worker records them in this order
            run_id = client.post(
                "/runs", json={"runnable": "web.echo", "input": n}, headers=auth("all")
            ).json()["id"]
            wait_for(lambda run_id=run_id: finished(client, run_id), what="the run to end")
            ids.append(run_id)
        listed = client.get(
            "/runs", params={"runnable": "web.echo", "limit": 3}, headers=auth("read")
        ).json()["runs"]
        paged = client.get(
            "/runs", params={"runnable": "web.echo", "limit": 2, "offset": 1}, headers=auth("read")
        ).json()["runs"]
        failed = client.get(
            "/runs", params={"status": "failed", "runnable": "web.echo"}, headers=auth("read")
        ).json()

    assert [view["id"] for view in listed] == ids[::-1]
    assert [view["id"] for view in paged] == ids[::-1][1:]
    assert failed == {"runs": []}


def test_cancel_stops_a_running_workflow_and_an_ended_run_cannot_be_cancelled(web_rig: WebRig) -> None:
    gate = web_rig.gate()
    with TestClient(web_rig.web()) as client:
        run_id = client.post(
            "/runs",
            json={"runnable": "web.gated", "input": {"gate": str(gate), "keys": ["a", "b"]}},
            headers=auth("all"),
        ).json()["id"]
        wait_for(
            lambda: (
                (web_rig.store.get_run(run_id) or None) and web_rig.store.get_run(run_id).status == "running"
            )
        )
        cancelled = client.post(f"/runs/{run_id}/cancel", json={}, headers=auth("cancel"))
        time.sleep(0.7)  # a worker reads the cancel flag at most every 0.5 s
        gate.touch()
        view = wait_for(lambda: finished(client, run_id), what="the cancelled run to end")
        again = client.post(f"/runs/{run_id}/cancel", json={}, headers=auth("cancel"))

    assert cancelled.status_code == 200 and cancelled.json()["cancel_requested"] is True
    assert view["status"] == "cancelled"
    assert again.status_code == 409


def test_an_unknown_run_is_404_and_runnables_and_their_graphs_are_listed(web_rig: WebRig) -> None:
    with TestClient(web_rig.web()) as client:
        missing = client.get("/runs/no-such-run", headers=auth("read"))
        runnables = client.get("/runnables", headers=auth("read")).json()["runnables"]
        graph = client.get("/runnables/record_search.demo/graph", headers=auth("read")).json()
        unknown = client.get("/runnables/nope/graph", headers=auth("read"))

    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    declared = [r["name"] for r in runnables if r["declared"]]
    assert declared == ["record_search.ask", "record_search.demo", "web.echo", "web.gated"]
    assert {"name": "web.gated", "label": "GatedWorkflow", "kind": "pipeline", "declared": True} in runnables
    assert graph["graph"]["kind"] == "pipeline"
    assert [child["label"] for child in graph["graph"]["children"]] == [
        "RecordSearchBatch",
        "SummarizeAnswers",
    ]
    assert graph["mermaid"].startswith("flowchart TD\n")
    assert unknown.status_code == 404


def test_a_forked_run_names_its_origin_over_rest_and_graphql(web_rig: WebRig) -> None:
    # a fork's record, as `agentloop replay --fork-at` writes it (tests/replay/test_fork.py)
    run_id, origin = (
        f"fork-{uuid.uuid4().hex}",
        {"run_id": "recorded-run", "path": "pipeline/1", "iteration": 1},
    )
    web_rig.store.create_run(
        run_id=run_id, runnable="web.echo", input={"q": 1}, principal="web-tests", forked_from=origin
    )
    plain = f"plain-{uuid.uuid4().hex}"
    web_rig.store.create_run(run_id=plain, runnable="web.echo", input={"q": 1}, principal="web-tests")
    query = "query Run($id: String!) { run(id: $id) { forkedFrom } }"
    with TestClient(web_rig.web()) as client:
        shown = client.get(f"/runs/{run_id}", headers=auth("start")).json()  # no read scope: still shown
        other = client.get(f"/runs/{plain}", headers=auth("read")).json()
        graphed = client.post(
            "/graphql", json={"query": query, "variables": {"id": run_id}}, headers=auth("read")
        )

    assert shown["forked_from"] == origin and shown["input"] != {"q": 1}  # the input stays hidden
    assert other["forked_from"] is None
    assert graphed.json()["data"]["run"]["forkedFrom"] == origin

"""``POST /runs/{id}/resume``: a wrong answer is a 409 and the run still waits; the right one
continues the run; a token without the ``start`` scope is refused."""

from __future__ import annotations

from human_support import start, wait_for_status
from starlette.testclient import TestClient

from agentloop.orchestration.settings import Settings
from agentloop.orchestration.settings.http import HttpSettings, parse_tokens
from agentloop.orchestration.web import create_web_app

TOKEN, READER = "resume-token-0123456789abcdef", "reader-token-0123456789abcdef"


def test_the_route_refuses_a_wrong_answer_and_resumes_with_the_right_one(human_worker) -> None:
    rig = human_worker
    http = HttpSettings(tokens=parse_tokens(f"{TOKEN},{READER}:read"))
    web = create_web_app(celery_app=rig.app, settings=Settings(http=http), store=rig.store)
    handle = start(rig.app, rig.store, "human.approve", "w")
    wait_for_status(rig.store, handle.run_id, "waiting")
    url = f"/runs/{handle.run_id}/resume"
    with TestClient(web) as client:
        reader = client.post(url, json={"answer": True}, headers={"Authorization": f"Bearer {READER}"})
        assert reader.status_code == 403
        headers = {"Authorization": f"Bearer {TOKEN}"}
        wrong = client.post(url, json={"answer": "yes"}, headers=headers)
        assert wrong.status_code == 409, wrong.text
        assert rig.store.get_run(handle.run_id).status == "waiting"
        right = client.post(url, json={"answer": True}, headers=headers)
        assert right.status_code == 200 and right.json()["accepted"] is True
        assert right.json()["status"] == right.json()["wait"]["status"] == "answered"
        nobody = client.post("/runs/run-that-never-was/resume", json={"answer": True}, headers=headers)
        assert nobody.status_code == 404, nobody.text
        assert handle.wait_sync(timeout=30)["steps"][1] == "approved=True"
        assert client.post(url, json={"answer": True}, headers=headers).status_code == 409


def test_the_graphql_mutation_answers_a_paused_run(human_worker) -> None:
    rig = human_worker
    http = HttpSettings(tokens=parse_tokens(TOKEN))
    web = create_web_app(celery_app=rig.app, settings=Settings(http=http), store=rig.store)
    handle = start(rig.app, rig.store, "human.approve", "g")
    wait_for_status(rig.store, handle.run_id, "waiting")
    mutation = "mutation($id: String!, $answer: JSON) { resumeRun(id: $id, answer: $answer) }"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(web) as client:
        wrong = client.post(
            "/graphql",
            json={"query": mutation, "variables": {"id": handle.run_id, "answer": 1}},
            headers=headers,
        ).json()
        assert wrong["errors"][0]["extensions"]["code"] == "CONFLICT"
        right = client.post(
            "/graphql",
            json={"query": mutation, "variables": {"id": handle.run_id, "answer": False}},
            headers=headers,
        ).json()
        assert right["data"]["resumeRun"]["accepted"] is True
    assert handle.wait_sync(timeout=30)["steps"][1] == "approved=False"


def test_only_the_runs_principal_or_an_admin_answers_its_question(human_worker) -> None:
    rig = human_worker
    shop, other, admin = "shop-token-0123456789abcdef", "other-token-0123456789abcde", TOKEN
    http = HttpSettings(tokens=parse_tokens(f"{shop}:read+start,{other}:read+start,{admin}"))
    web = create_web_app(celery_app=rig.app, settings=Settings(http=http), store=rig.store)
    mutation = "mutation($id: String!, $answer: JSON) { resumeRun(id: $id, answer: $answer) }"
    outside = start(rig.app, rig.store, "human.approve", "no principal")  # not over HTTP: admins only
    with TestClient(web) as client:
        run_id = client.post(
            "/runs",
            json={"runnable": "human.approve", "input": "p"},
            headers={"Authorization": f"Bearer {shop}"},
        ).json()["id"]
        wait_for_status(rig.store, run_id, "waiting")
        wait_for_status(rig.store, outside.run_id, "waiting")
        refused = [
            client.post(
                f"/runs/{run}/resume", json={"answer": True}, headers={"Authorization": f"Bearer {who}"}
            )
            for run, who in ((run_id, other), (outside.run_id, shop))
        ]
        refused_gql = client.post(
            "/graphql",
            json={"query": mutation, "variables": {"id": run_id, "answer": True}},
            headers={"Authorization": f"Bearer {other}"},
        ).json()
        still = rig.store.get_run(run_id).status
        own = client.post(
            f"/runs/{run_id}/resume", json={"answer": True}, headers={"Authorization": f"Bearer {shop}"}
        )
        by_admin = client.post(
            f"/runs/{outside.run_id}/resume",
            json={"answer": False},
            headers={"Authorization": f"Bearer {admin}"},
        )

    assert [response.status_code for response in refused] == [404, 404]
    assert refused_gql["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    assert still == "waiting"
    assert own.status_code == 200 and own.json()["accepted"] is True
    assert by_admin.status_code == 200 and by_admin.json()["accepted"] is True
    assert outside.wait_sync(timeout=30)["steps"][1] == "approved=False"
    wait_for_status(rig.store, run_id, "succeeded")

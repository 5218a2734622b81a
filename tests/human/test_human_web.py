"""``POST /runs/{id}/resume``: a wrong answer is a 409 and the run still waits; the right one
continues the run; a token without the ``start`` scope is refused."""

from __future__ import annotations

from human_support import start, wait_for_status
from starlette.testclient import TestClient

from agentloop.orchestration.settings import Settings
from agentloop.orchestration.settings_http import HttpSettings, parse_tokens
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

"""A registered workflow triggered and followed through a real Flower's HTTP API, its input hidden.

The stack (``conftest.ops_stack``): a private Redis, one prefork worker
logging at INFO, and ``celery -A agentloop flower`` with basic auth. The
input carries a marker; it travels through stage arguments and an
intermediate result, and must show nowhere in Flower's answers or in the
worker's log, while task names and states stay readable.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from ops_support import FLOWER_PASSWORD, FLOWER_USER, FlowerClient, OpsStack, run_flower

pytestmark = pytest.mark.integration

SECRET = "sk-test-MARKER123"
READY = {"SUCCESS", "FAILURE", "REVOKED"}


def launch(client: FlowerClient, runnable: str, input: Any) -> str:
    answer = client.post(
        "/api/task/send-task/agentloop.launch", {"kwargs": {"runnable": runnable, "input": input}}
    )
    task_id: str = answer["task-id"]
    return task_id


def run_tasks(client: FlowerClient, run_id: str) -> dict[str, Any]:
    """The tasks of one run in Flower's task list (all share the launch task's id as ``root_id``)."""
    return {key: task for key, task in client.get("/api/tasks").items() if task["root_id"] == run_id}


def assert_hidden_everywhere(stack: OpsStack) -> None:
    leaks = [answer for answer in stack.client.transcript if SECRET in answer]
    assert not leaks, f"Flower's API showed the secret:\n{leaks[0][:2000]}"
    assert SECRET not in stack.worker.log_text()
    assert SECRET not in stack.flower.log_text()


def test_a_workflow_triggered_through_flower_is_followed_to_its_result_with_its_input_hidden(
    ops_stack: OpsStack,
) -> None:
    client, hostname = ops_stack.client, ops_stack.worker.hostname
    workflow_input = {"secret": SECRET, "steps": 10, "delay": 0.1}
    size = len(json.dumps(workflow_input))
    run_id = launch(client, "ops.carry_then_summarize", workflow_input)

    states: set[tuple[str, str]] = set()
    active: list[dict[str, Any]] = []
    active_stages: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        tasks = run_tasks(client, run_id)
        states |= {(task["name"], task["state"]) for task in tasks.values()}
        if not active_stages and any(task["name"] == "agentloop.stage" for task in tasks.values()):
            workers = client.get("/api/workers", workername=hostname, refresh=1)  # runs `inspect active`
            active = workers[hostname].get("active") or []
            # the stage may have ended, or another task of the run be active, at that moment
            active_stages = [request for request in active if request.get("name") == "agentloop.stage"]
        result = client.get(f"/api/task/result/{run_id}")
        if result["state"] in READY:
            break
        time.sleep(0.1)

    # followed to its result through the API
    assert result == {"task-id": run_id, "state": "SUCCESS", "result": {"steps": 10, "input_chars": size}}
    # readable names, and the PROGRESS state while the stages worked
    names = set(client.get("/api/task/types")["task-types"])
    assert {"agentloop.launch", "agentloop.stage", "agentloop.pipeline_done", "agentloop.finalize"} <= names
    assert ("agentloop.stage", "PROGRESS") in states, states
    # progress, read with the agentloop.progress task through the same API
    page_id = client.post("/api/task/send-task/agentloop.progress", {"kwargs": {"run_id": run_id}})["task-id"]
    page = client.get(f"/api/task/result/{page_id}", timeout=10)["result"]
    assert page["status"] == "succeeded"
    assert {event["path"] for event in page["events"]} == {"", "pipeline/0", "pipeline/1"}
    assert page["events"][-1]["status"] == "completed"

    # what Flower shows of the tasks: identifiers and size hints, never the content
    details = [client.get(f"/api/task/info/{task_id}") for task_id in run_tasks(client, run_id)]
    stages = [task for task in details if task["name"] == "agentloop.stage"]
    assert len(stages) == 2
    first = next(task for task in stages if "index=0" in task["args"])
    assert first["args"] == (
        f"(previous=<hidden dict {size} chars>, "
        f"node=<node runnable='ops.carry_then_summarize' path='' run_id='{run_id}'>, "
        "index=0, input=None)"  # the pipeline does not read its own input: not carried along
    )
    assert first["result"].startswith("<hidden result, ")  # stage 0's output carries the secret on
    assert active_stages, "the worker answered `inspect active` with no stage while stages ran"
    assert all("<hidden" in str(request["args"]) for request in active_stages)
    assert not any(SECRET in str(request) for request in active)
    assert "succeeded in" in ops_stack.worker.log_text()
    assert_hidden_everywhere(ops_stack)


def test_a_failing_workflow_whose_error_quotes_its_input_leaks_it_neither_to_flower_nor_the_log(
    ops_stack: OpsStack,
) -> None:
    client = ops_stack.client
    run_id = launch(client, "ops.leaky", {"secret": SECRET})
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        answer = client.request("GET", f"/api/task/info/{run_id}")
        if answer.status == 200 and answer.json()["state"] in READY:
            break
        time.sleep(0.1)
    info = answer.json()

    assert info["state"] == "FAILURE"
    assert info["exception"] == "ValueError(\"cannot handle {'secret': '<hidden>'}\")"
    assert "ValueError: cannot handle {'secret': '<hidden>'}" in info["traceback"]
    assert f"agentloop.launch[{run_id}] raised unexpected" in ops_stack.worker.log_text()
    assert_hidden_everywhere(ops_stack)


def test_flowers_api_answers_only_with_the_credentials(ops_stack: OpsStack) -> None:
    anonymous = FlowerClient(ops_stack.flower.url, user=None)
    wrong = FlowerClient(ops_stack.flower.url, password="wrong")
    assert anonymous.request("GET", "/api/tasks").status == 401
    assert wrong.request("GET", "/api/tasks").status == 401
    assert anonymous.request("POST", "/api/task/send-task/agentloop.ping", body={}).status == 401
    assert ops_stack.client.request("GET", "/api/tasks").status == 200


def test_a_flower_configured_from_the_environment_like_the_unit_is_authenticated_and_read_only(
    ops_stack: OpsStack,
) -> None:
    env = {
        **ops_stack.env,
        "FLOWER_BASIC_AUTH": f"{FLOWER_USER}:{FLOWER_PASSWORD}",
        "FLOWER_READ_ONLY": "true",
    }
    with run_flower(env, auth=False) as flower:  # no option on the command line: all from the environment
        client = FlowerClient(flower.url)
        assert FlowerClient(flower.url, user=None).request("GET", "/api/tasks").status == 401
        assert client.request("GET", "/api/tasks").status == 200
        refused = client.request("POST", "/api/task/send-task/agentloop.ping", body={})
        assert (refused.status, refused.text) == (403, "Read only mode is enabled")


def test_a_flower_without_authentication_keeps_its_api_closed(ops_stack: OpsStack) -> None:
    with run_flower(ops_stack.env, auth=False) as flower:
        answer = FlowerClient(flower.url, user=None).request("GET", "/api/tasks")
    assert answer.status == 401
    assert "FLOWER_UNAUTHENTICATED_API" in answer.text

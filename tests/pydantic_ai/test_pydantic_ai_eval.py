"""``agentloop eval`` over a dataset runs a registered pydantic-ai agent like any runnable: each
case one run of the agent (its official SDK against the local OpenAI-protocol server), scored by
exact match against the agent's validated output."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflows.pydantic_agents import answer

from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer
from tests.evals.eval_support import invoke, kept, write_dataset

API_KEY = "sk-test-pydantic-ai-eval-0123456789"


def test_eval_scores_each_case_of_a_pydantic_ai_agent(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.pydantic_agents")
    monkeypatch.setenv("PAI_TOOL_LOG", str(home / "tools.log"))
    cases = [
        {"id": "right", "input": "invoice c-7", "expected": {"customer": "ACME GmbH", "total": 200}},
        {"id": "wrong", "input": "invoice c-8", "expected": {"customer": "ACME GmbH", "total": 999}},
    ]
    write_dataset(home / "cases.jsonl", cases)
    with OpenAICompatibleServer(api_key=API_KEY, responder=answer) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", API_KEY)

        result = invoke("eval", "pai.invoicer", "cases.jsonl")

        assert len(server.completion_requests) == 6  # three requests a case

    assert result.exit_code == 0, result.output
    assert "passed 1 of 2 (50%)" in result.output
    [report] = kept(home)
    right, wrong = report["cases"]
    assert (right["passed"], wrong["passed"]) == (True, False)
    assert right["output"] == {"customer": "ACME GmbH", "total": 200}

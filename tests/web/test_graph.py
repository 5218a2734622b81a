"""``agentloop graph NAME`` and the graph the viewer draws: stages in order, branches, nesting,
loops with their actions, recursion drawn once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner
from web_support import MODULES

from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.cli import app
from agentloop.orchestration.graph import graph_of, to_mermaid
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.pipelines import BaseAgentPipeline, BaseCompositeAgent

ROOT = Path(__file__).resolve().parents[2]
DEMO_MERMAID = """flowchart TD
    subgraph n1["<b>RecordSearchDemo</b> · record_search.demo · pipeline"]
        direction TB
        n2{{"<b>RecordSearchBatch</b><br/>composite: a branch each, collect, 4 at once"}}
        n3(["<b>RecordSearchStage</b><br/>loop, up to 4 iterations"])
        n4[/"plan_search"/]
        n3 -. action .-> n4
        n5[/"execute_search_plan"/]
        n3 -. action .-> n5
        n6[/"compose_answer"/]
        n3 -. action .-> n6
        n2 == branch ==> n3
        n7["<b>SummarizeAnswers</b><br/>action stage"]
        n8[/"summarize_answers"/]
        n7 -. action .-> n8
        n2 -- then --> n7
    end
"""


class NeedsContext(BaseAgentLoop):
    """A loop whose actions depend on its context: the graph leaves them out."""

    max_iterations = 2

    @property
    def registry(self) -> Any:
        return self.context.actions

    def create_initial_state(self, *, input: Any) -> Any:
        return input

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return state

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return True

    def build_result(self, *, state: Any) -> Any:
        return state


class Recursive(BaseCompositeAgent):
    branch_runnables: tuple[type, ...] = ()


Recursive.branch_runnables = (Recursive, NeedsContext)


class Outer(BaseAgentPipeline):
    stages = (NeedsContext, Recursive)


def test_the_demo_workflow_as_mermaid_and_in_the_docs() -> None:
    registry = RunnableRegistry.from_modules(MODULES)
    drawn = to_mermaid(graph_of(registry, "record_search.demo"))
    documented = (ROOT / "docs" / "graphs.md").read_text().split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert drawn == DEMO_MERMAID == documented


def test_nesting_recursion_and_actions_that_need_a_context() -> None:
    registry = RunnableRegistry()
    registry.register("outer", Outer)
    tree = graph_of(registry, "outer").to_dict()

    first, composite = tree["children"]
    assert (tree["kind"], first["kind"], first["actions"], first["max_iterations"]) == (
        "pipeline",
        "loop",
        [],
        2,
    )
    assert [child["label"] for child in composite["children"]] == ["Recursive", "NeedsContext"]
    assert composite["children"][0]["recursive"] is True and composite["children"][0]["children"] == []
    assert "(recursive: drawn above)" in to_mermaid(graph_of(registry, "outer"))


def test_the_graph_command_prints_mermaid_or_json() -> None:
    runner = CliRunner()
    env = {"AGENTLOOP_IMPORTS": "agentloop.examples.record_search.workflows"}
    mermaid = runner.invoke(app, ["graph", "record_search.demo"], env=env)
    as_json = runner.invoke(app, ["graph", "record_search.ask", "--json"], env=env)
    unknown = runner.invoke(app, ["graph", "nope"], env=env)

    assert mermaid.exit_code == 0 and mermaid.output == DEMO_MERMAID
    assert as_json.exit_code == 0 and '"kind": "loop"' in as_json.output
    assert unknown.exit_code == 2 and "unknown runnable 'nope'" in unknown.output

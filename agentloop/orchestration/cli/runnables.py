"""``agentloop runnables``: what a message may name, from the modules in ``AGENTLOOP_IMPORTS``.

Each registered runnable with its kind (loop, pipeline, composite, action
stage), a pipeline's stages in order, a composite's branch runnables and a
loop's actions where they can be read without a context. Stages and branches
are listed too, under the names the registry derived for them
(``module.Class``), since a worker runs each as its own task. Names and kinds
are never cut, whatever the terminal's width: when the three columns do not fit
(long derived names at 80 columns), what a runnable holds goes under its name.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from agentloop.orchestration.cli.common import (
    cli_settings,
    console,
    deployment_registry,
    errors,
    json_option,
    print_json,
)
from agentloop.orchestration.graph import GraphNode, graph_of
from agentloop.orchestration.registry import RunnableRegistry

#: How each kind is shown.
KIND_LABELS = {"action_stage": "action stage"}
#: The least width of the "holds" column beside the names; below it, holds go under the name.
HOLDS_MIN_WIDTH = 24
#: What a three-column table's borders and padding take: 4 rules and 2 spaces per column.
_TABLE_FRAME = 4 + 3 * 2


def describe(registry: RunnableRegistry, name: str) -> dict[str, Any]:
    """One runnable as JSON: name, class, kind, whether the name was derived, what it holds."""
    node: GraphNode = graph_of(registry, name)
    children = [child.name for child in node.children]
    return {
        "name": name,
        "class": f"{registry.get(name).runnable.__module__}.{node.label}",
        "kind": KIND_LABELS.get(node.kind, node.kind),
        "derived": node.derived,
        "stages": children if node.kind == "pipeline" else [],
        "branches": children if node.kind == "composite" else [],
        "actions": list(node.actions),
        "max_iterations": node.max_iterations,
    }


def _holds(entry: dict[str, Any]) -> str:
    parts = []
    if entry["stages"]:
        parts.append("stages: " + " -> ".join(entry["stages"]))
    if entry["branches"]:
        parts.append("branches: " + ", ".join(entry["branches"]))
    if entry["actions"]:
        parts.append("actions: " + ", ".join(entry["actions"]))
    if entry["max_iterations"] is not None:
        parts.append(f"up to {entry['max_iterations']} iterations")
    return "\n".join(parts)


def runnables(as_json: bool = json_option()) -> None:
    """The registered runnables: names, kinds, stages and branch runnables."""
    settings = cli_settings()
    registry = deployment_registry(settings)
    entries = [describe(registry, name) for name in registry.names]
    declared = [entry for entry in entries if not entry["derived"]]
    ordered = declared + [entry for entry in entries if entry["derived"]]
    if as_json:
        print_json(ordered)
        return
    if not settings.imports:
        errors.print("[yellow]AGENTLOOP_IMPORTS names no module: nothing is registered[/]")
    kinds = [entry["kind"] + ("*" if entry["derived"] else "") for entry in ordered]
    widest, kind_width = (
        max((len(entry["name"]) for entry in ordered), default=4),
        max(map(len, kinds), default=4),
    )
    beside = widest + kind_width + HOLDS_MIN_WIDTH + _TABLE_FRAME <= console.width
    table = Table(
        title=f"{len(declared)} declared, {len(ordered) - len(declared)} stages and branches",
        caption="* a stage or branch, under the name the registry derived for it",
    )
    # a name is never longer than its column: only what a runnable holds is folded
    table.add_column("name" if beside else "name, and what it holds", overflow="fold", min_width=widest)
    table.add_column("kind", no_wrap=True, min_width=kind_width)
    if beside:
        table.add_column("holds", overflow="fold")
    for entry, kind in zip(ordered, kinds, strict=True):
        holds = _holds(entry)
        if beside:
            table.add_row(entry["name"], kind, holds)
        else:  # the name whole on its line, what it holds folded under it
            under = Text(entry["name"])
            if holds:
                under.append("\n" + "\n".join(f"  {line}" for line in holds.split("\n")), style="dim")
            table.add_row(under, kind)
    console.print(table)

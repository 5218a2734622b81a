"""The shape of a registered runnable, as a tree and as a mermaid diagram.

:func:`graph_of` walks a registered runnable's classes without running
anything: a pipeline's stages in order, a composite's branch runnables (its
``branch_runnables``: the width is decided at run time), nesting to any depth,
and a loop's actions where its action registry can be read without a context.
:func:`to_mermaid` draws the tree as a mermaid ``flowchart`` (``agentloop graph
NAME``); :meth:`GraphNode.to_dict` is the JSON the run viewer draws.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal

from agentloop.loops.base import BaseAgentLoop
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.pipelines.action_stage import BaseActionStage
from agentloop.pipelines.composite import BaseCompositeAgent
from agentloop.pipelines.pipeline import BaseAgentPipeline

__all__ = ["GraphNode", "graph_of", "to_mermaid"]

logger = logging.getLogger(__name__)

Kind = Literal["pipeline", "composite", "loop", "action_stage", "runnable"]


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphNode:
    """One runnable in the tree: its registered name, class and kind, and what it holds."""

    name: str
    label: str
    kind: Kind
    #: A pipeline's stages in order; a composite's branch runnables.
    children: tuple[GraphNode, ...] = ()
    #: The actions a loop may perform (or an action stage's action), where known.
    actions: tuple[str, ...] = ()
    max_iterations: int | None = None
    #: A composite's failure policy and concurrency bound.
    failure_policy: str | None = None
    max_concurrency: int | None = None
    #: The class already appears above this node (a recursive workflow): not expanded again.
    recursive: bool = False
    #: ``name`` is the name the registry derived for a stage or branch (module and class), not a declared one.
    derived: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (what ``GET /runnables/{name}/graph`` answers)."""
        return {
            "name": self.name,
            "label": self.label,
            "kind": self.kind,
            "children": [child.to_dict() for child in self.children],
            "actions": list(self.actions),
            "max_iterations": self.max_iterations,
            "failure_policy": self.failure_policy,
            "max_concurrency": self.max_concurrency,
            "recursive": self.recursive,
            "derived": self.derived,
        }


def _kind(cls: type) -> Kind:
    if issubclass(cls, BaseAgentPipeline):
        return "pipeline"
    if issubclass(cls, BaseCompositeAgent):
        return "composite"
    if issubclass(cls, BaseAgentLoop):
        return "loop"
    if issubclass(cls, BaseActionStage):
        return "action_stage"
    return "runnable"


def _actions(cls: type) -> tuple[str, ...]:
    """The names of the actions ``cls`` declares, when they can be read without a context."""
    if issubclass(cls, BaseActionStage):
        action = getattr(cls, "action", None)
        name = getattr(action, "name", None)
        return (name,) if isinstance(name, str) else ()
    if not issubclass(cls, BaseAgentLoop):
        return ()
    try:
        return tuple(cls.create(context=None).registry.names)
    except Exception:  # the registry needs the real context: the graph leaves actions out
        logger.debug("actions of %s need a context; left out of the graph", cls.__qualname__)
        return ()


def _name(registry: RunnableRegistry, cls: type) -> str:
    try:
        return registry.name_of(cls)
    except LookupError:
        return f"{cls.__module__}.{cls.__qualname__}"


def _node(registry: RunnableRegistry, cls: type, name: str, above: tuple[type, ...]) -> GraphNode:
    kind = _kind(cls)
    derived = name == f"{cls.__module__}.{cls.__qualname__}"
    if cls in above:
        return GraphNode(name=name, label=cls.__qualname__, kind=kind, recursive=True, derived=derived)
    inner: tuple[type, ...] = ()
    if kind == "pipeline":
        inner = tuple(getattr(cls, "stages", ()))
    elif kind == "composite":
        inner = tuple(getattr(cls, "branch_runnables", ()))
    children = tuple(_node(registry, child, _name(registry, child), (*above, cls)) for child in inner)
    composite = kind == "composite"
    return GraphNode(
        name=name,
        label=cls.__qualname__,
        kind=kind,
        children=children,
        actions=_actions(cls),
        max_iterations=getattr(cls, "max_iterations", None) if kind == "loop" else None,
        failure_policy=str(getattr(cls, "failure_policy", "")) if composite else None,
        max_concurrency=getattr(cls, "max_concurrency", None) if composite else None,
        derived=derived,
    )


def graph_of(registry: RunnableRegistry, name: str) -> GraphNode:
    """The tree of the runnable registered as ``name``
    (:class:`~agentloop.orchestration.errors.UnknownRunnableError`
    when there is none)."""
    return _node(registry, registry.get(name).runnable, name, ())


# -- mermaid -----------------------------------------------------------------------------------------


def _text(value: str) -> str:
    """``value`` safe inside a quoted mermaid label."""
    return value.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def _label(node: GraphNode) -> str:
    lines = [f"<b>{_text(node.label)}</b>", "" if node.derived else _text(node.name)]
    if node.kind == "loop":
        lines.append(f"loop, up to {node.max_iterations} iterations")
    elif node.kind == "composite":
        bound = f", {node.max_concurrency} at once" if node.max_concurrency else ""
        lines.append(f"composite: a branch each, {node.failure_policy}{bound}")
    elif node.kind == "action_stage":
        lines.append("action stage")
    if node.recursive:
        lines.append("(recursive: drawn above)")
    return "<br/>".join(line for line in lines if line)


class _Drawing:
    """Mermaid lines for a tree, with one id per drawn node."""

    def __init__(self) -> None:
        self.lines: list[str] = ["flowchart TD"]
        self.count = 0

    def new_id(self) -> str:
        self.count += 1
        return f"n{self.count}"

    def box(self, node: GraphNode, indent: str) -> str:
        node_id = self.new_id()
        label = _label(node)
        shape = {"composite": ('{{"', '"}}'), "loop": ('(["', '"])')}.get(node.kind, ('["', '"]'))
        self.lines.append(f"{indent}{node_id}{shape[0]}{label}{shape[1]}")
        for action in node.actions:
            action_id = self.new_id()
            self.lines.append(f'{indent}{action_id}[/"{_text(action)}"/]')
            self.lines.append(f"{indent}{node_id} -. action .-> {action_id}")
        return node_id

    def draw(self, node: GraphNode, indent: str = "    ") -> tuple[str, str]:
        """Draw ``node``; the ids where an arrow enters it and leaves it."""
        if node.kind == "pipeline" and node.children and not node.recursive:
            return self._pipeline(node, indent)
        node_id = self.box(node, indent)
        if node.kind == "composite" and not node.recursive:
            for child in node.children:
                first, _ = self.draw(child, indent)
                self.lines.append(f"{indent}{node_id} == branch ==> {first}")
        return node_id, node_id

    def _pipeline(self, node: GraphNode, indent: str) -> tuple[str, str]:
        graph_id = self.new_id()
        title = " · ".join(
            part
            for part in (f"<b>{_text(node.label)}</b>", "" if node.derived else _text(node.name), "pipeline")
            if part
        )
        self.lines.append(
            f'{indent}subgraph {graph_id}["{title}"]'
        )  # one line: mermaid overlaps longer titles
        self.lines.append(f"{indent}    direction TB")
        ends: list[tuple[str, str]] = [self.draw(child, indent + "    ") for child in node.children]
        for (_, leaving), (entering, _) in pairwise(ends):
            self.lines.append(f"{indent}    {leaving} -- then --> {entering}")
        self.lines.append(f"{indent}end")
        return graph_id, graph_id


def to_mermaid(node: GraphNode) -> str:
    """The tree as a mermaid ``flowchart``: a pipeline is a box of its stages in order, a composite
    a hexagon with a bold arrow to each kind of branch, a loop a rounded box with its actions."""
    drawing = _Drawing()
    drawing.draw(node)
    return "\n".join(drawing.lines) + "\n"

"""``agentloop graph NAME``: a registered runnable's shape as a mermaid diagram (or JSON)."""

from __future__ import annotations

import json

import typer

from agentloop.orchestration.cli.common import cli_settings, deployment_registry, fail
from agentloop.orchestration.cli.demo import DEMO_MODULE
from agentloop.orchestration.errors import UnknownRunnableError
from agentloop.orchestration.graph import graph_of, to_mermaid


def graph(
    name: str = typer.Argument(..., help="A registered runnable (see AGENTLOOP_IMPORTS)."),
    as_json: bool = typer.Option(False, "--json", help="Print the tree as JSON instead of mermaid."),
) -> None:
    """Print the runnable's stages in order, its composites' branches, nesting and loops' actions."""
    settings = cli_settings()
    registry = deployment_registry(
        settings if settings.imports else settings.model_copy(update={"imports": (DEMO_MODULE,)})
    )
    try:
        node = graph_of(registry, name)
    except UnknownRunnableError as error:
        raise fail(str(error)) from None
    typer.echo(json.dumps(node.to_dict(), indent=2) if as_json else to_mermaid(node), nl=as_json)

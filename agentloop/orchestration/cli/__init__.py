"""The ``agentloop`` command line.

::

    agentloop demo                       the main job, on embedded defaults
    agentloop trigger NAME --input JSON [--context JSON] [--wait] [--record]
    agentloop cancel RUN_ID              ask every task of a run to stop
    agentloop resume RUN_ID [--answer JSON]  answer a paused run's question (or show it)
    agentloop runnables                  the registered runnables, their stages and branches
    agentloop runs list [--wide] | show ID | watch ID | export ID [-o FILE] | import FILE
    agentloop runs prune --older-than 30d [--dry-run]  the workflows that ended before then, deleted
    agentloop replay RUN_ID|FILE         a recorded run again, here, against its recording
    agentloop tools list | show ID | load FILE... | sync
    agentloop graph NAME [--json]        a runnable's shape, as a mermaid diagram
    agentloop eval RUNNABLE DATASET [--scorer SPEC] [--celery]  a runnable scored over a dataset
    agentloop eval compare A B | list | show ID  what changed between two evaluations; the kept ones
    agentloop serve [--host H --port P]  runs over HTTP/GraphQL/SSE and the viewer at /ui
    agentloop mcp serve [--http] [--tool NAME]  the runnables as an MCP server's tools

Every command that prints takes ``--json`` (JSON on stdout, for scripts).
Workers, beat and Flower start with Celery's own commands:
``celery -A agentloop worker|beat|flower``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from agentloop.orchestration.cli.cancel import cancel
from agentloop.orchestration.cli.common import JsonErrorsGroup
from agentloop.orchestration.cli.demo import demo
from agentloop.orchestration.cli.evals import evals
from agentloop.orchestration.cli.graph import graph
from agentloop.orchestration.cli.mcp import mcp
from agentloop.orchestration.cli.replay import replay_command
from agentloop.orchestration.cli.resume import resume
from agentloop.orchestration.cli.runnables import runnables
from agentloop.orchestration.cli.runs import runs
from agentloop.orchestration.cli.serve import serve
from agentloop.orchestration.cli.tools import tools
from agentloop.orchestration.cli.trigger import trigger

app = typer.Typer(
    name="agentloop",
    help="Agent loops and composite agent workflows, in-process or on Celery.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    cls=JsonErrorsGroup,
)


def _one_line(command: Callable[..., Any]) -> str:
    """A command's summary for the commands list: the first paragraph of its docstring as one
    line, which the terminal wraps at its width (the docstring's own line breaks would cut it)."""
    return " ".join((command.__doc__ or "").split("\n\n")[0].split())


for _name, _command in (
    ("demo", demo),
    ("trigger", trigger),
    ("cancel", cancel),
    ("resume", resume),
    ("runnables", runnables),
    ("graph", graph),
    ("replay", replay_command),
    ("serve", serve),
):
    app.command(_name, short_help=_one_line(_command))(_command)
app.add_typer(runs, name="runs")
app.add_typer(tools, name="tools")
app.add_typer(evals, name="eval")
app.add_typer(mcp, name="mcp")


def main() -> None:
    app()


__all__ = ["app", "main"]

"""The command line's reference, read from its own definitions (typer's command objects).

Every command and sub-command of ``agentloop``: its usage line, its help, and each argument and
option as ``agentloop COMMAND --help`` shows it (the same help records, defaults and ranges).
"""

from __future__ import annotations

import inspect
from typing import Any

import typer

from agentloop.orchestration.cli import app
from docs.hooks.text import cell


def params_table(command: Any, context: Any) -> list[str]:
    rows = []
    for param in command.params:
        record = param.get_help_record(context)
        if record is None or getattr(param, "hidden", False):
            continue
        invocation, help_text = record
        rows.append(f"| `{cell(invocation)}` | {cell(help_text)} |")
    if not rows:
        return []
    return ["| argument or option | meaning |", "| --- | --- |", *rows, ""]


def document(command: Any, context: Any, level: int) -> list[str]:
    lines = [f"{'#' * level} `{context.command_path}`", ""]
    lines += ["```text", command.get_usage(context), "```", ""]
    help_text = inspect.cleandoc(command.help or "").replace("\b\n", "")
    if help_text:
        lines += [help_text, ""]
    lines += params_table(command, context)
    if hasattr(command, "list_commands"):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                lines += document(sub, command.context_class(sub, info_name=name, parent=context), level + 1)
    return lines


def cli_reference() -> str:
    """Every command of ``agentloop``, from its definitions."""
    command = typer.main.get_command(app)
    return "\n".join(document(command, command.context_class(command, info_name="agentloop"), 2))

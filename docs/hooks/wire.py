"""The wire contract's reference, read from ``orchestration/wire.py`` and the tasks that serve it:
every task name, the keyword arguments each task takes, the launch's fields, a progress page's keys
and a progress event's fields.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

from celery import Celery

from agentloop.loops.progress import ProgressEvent
from agentloop.orchestration import wire
from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.tasks import INTERNAL_TASKS
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.store.memory import InMemoryRunStore
from docs.hooks.text import cell, roles_to_code


def annotation(value: Any) -> str:
    text = value if isinstance(value, str) else getattr(value, "__name__", str(value))
    return cell(str(text).replace("typing.", ""))


def signature(function: Any) -> str:
    """The task's keyword arguments, ``self`` (the bound task) left out."""
    params = [p for name, p in inspect.signature(function).parameters.items() if name != "self"]
    parts = []
    for param in params:
        part = param.name
        if param.default is not inspect.Parameter.empty:
            part += f"={param.default!r}"
        parts.append(part)
    return ", ".join(parts)


def summary(function: Any) -> str:
    return cell((inspect.getdoc(function) or "").split("\n\n")[0])


def an_app() -> Celery:
    """The app a worker runs (on the embedded defaults, nothing registered): its tasks are the contract's."""
    return create_app(settings=Settings(), registry=RunnableRegistry(), store=InMemoryRunStore())


def task_reference() -> str:
    """Every task name of :data:`wire.TASK_NAMES`: who sends it, its kwargs and what it does."""
    app = an_app()
    try:
        tasks = {name: app.tasks[name] for name in wire.TASK_NAMES}  # a name without a task fails here
    finally:
        app.close()
    rows = ["| task | sent by | keyword arguments | what it does |", "| --- | --- | --- | --- |"]
    for name, task in tasks.items():
        function = task.run
        sender = (
            "the framework's own canvases" if name in INTERNAL_TASKS else "clients, beat or the framework"
        )
        rows.append(f"| `{name}` | {sender} | `{signature(function)}` | {summary(function)} |")
    return "\n".join(rows) + "\n"


def launch_reference() -> str:
    """``agentloop.launch``'s keyword arguments, from :class:`wire.LaunchRequest`."""
    hints = typing.get_type_hints(wire.LaunchRequest)
    rows = ["| keyword | type | default |", "| --- | --- | --- |"]
    for field in dataclasses.fields(wire.LaunchRequest):
        if field.default is not dataclasses.MISSING:
            default = f"`{field.default!r}`"
        elif field.default_factory is not dataclasses.MISSING:
            default = f"`{field.default_factory()!r}`"
        else:
            default = "(required)"
        rows.append(f"| `{field.name}` | `{annotation(hints[field.name])}` | {default} |")
    app = an_app()
    try:
        doc = inspect.getdoc(app.tasks[wire.LAUNCH].run) or ""
    finally:
        app.close()
    return "\n".join(rows) + "\n\n" + roles_to_code(doc) + "\n"


def progress_reference() -> str:
    """A progress page's keys (``agentloop.progress``'s answer) and a progress event's fields."""
    app = an_app()
    try:
        page = app.tasks[wire.PROGRESS].apply(kwargs={"run_id": "an-id-nobody-sent"}).get()
    finally:
        app.close()
    hints = typing.get_type_hints(ProgressEvent)
    lines = [
        "A page for an id nothing is known of, as the task answers it:",
        "",
        "```python",
        repr(page),
        "```",
        "",
        "The fields of each event in `events` (`ProgressEvent.to_dict()`):",
        "",
        "| field | type |",
        "| --- | --- |",
    ]
    lines += [f"| `{f.name}` | `{annotation(hints[f.name])}` |" for f in dataclasses.fields(ProgressEvent)]
    return "\n".join(lines) + "\n"

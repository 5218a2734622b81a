"""Typed actions' tool schemas written to the ``AiTool`` table (``agentloop tools sync``).

The table stays where tool schemas live at run time; a typed forced-tool action
(:class:`~actions.TypedToolAction`) generates its payload from its output type,
and :func:`sync_tools` writes it under the action's tool id, marked::

    payload["x-agentloop"] = {"generated_from": "module.Class", "sha256": "<the payload's hash>"}

(the hash is of the payload without the marker; processors send a tool's
``name``, ``description`` and ``parameters`` only, so a model never sees the
marker, and no column is needed). For each tool id:

- no usable row: the generated payload is written (``created``);
- a generated row nobody touched since (its content still has its marker's hash):
  ``unchanged``, or rewritten when the output type changed (``updated``);
- a row edited by hand (its content no longer has its marker's hash, or it has
  no marker: written by ``agentloop tools load`` or by hand) wins: it is kept
  (``kept``), with a warning when it differs from the generated payload
  (``drifted``); ``force=True`` overwrites it (``updated``).

A typed step needs no row: without one it sends its type's schema. A row wins
at run time, so :func:`check_tools` (``agentloop tools sync --check``) writes
nothing and reports, per tool id, ``from the type`` (no row), ``unchanged``
(the row is the generated schema) or ``drifted`` (the row differs: edited by
hand, or generated from an older type).

:func:`typed_actions` finds the actions of a deployment: the action of each
registered action stage, the actions of each registered loop's registry (where
it can be read without a context), and the typed actions its modules define or
import.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentloop.actions.typed import SYNC_MARKER, TypedToolAction, canonical_tool_content
from agentloop.loops.base import BaseAgentLoop
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import ToolStore, validate_tool_payload
from agentloop.pipelines.action_stage import BaseActionStage

logger = logging.getLogger(__name__)

#: The key of the marker a generated payload carries.
MARKER = SYNC_MARKER
#: What :func:`sync_tools` did with each tool id.
CREATED, UPDATED, UNCHANGED, KEPT, DRIFTED = "created", "updated", "unchanged", "kept", "drifted"
#: What :func:`check_tools` found for a tool id with no row: the step sends its type's schema.
FROM_TYPE = "from the type"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSync:
    """What :func:`sync_tools` did for one tool id (``status``: created, updated, unchanged,
    kept, drifted), and for which action."""

    tool_id: str
    action: str
    status: str
    detail: str = ""


def payload_hash(payload: Mapping[str, Any]) -> str:
    """The SHA-256 of ``payload`` without its marker, as canonical JSON."""
    return hashlib.sha256(canonical_tool_content(payload).encode()).hexdigest()


def action_path(action: type) -> str:
    return f"{action.__module__}.{action.__qualname__}"


def generated_payload(action: type[TypedToolAction[Any]]) -> dict[str, Any]:
    """``action``'s payload, checked as the tool store checks one, with its marker."""
    payload = validate_tool_payload(action.tool_payload())
    return {**payload, MARKER: {"generated_from": action_path(action), "sha256": payload_hash(payload)}}


def _is_hand_edited(row: Mapping[str, Any]) -> bool:
    marker = row.get(MARKER)
    return not isinstance(marker, Mapping) or marker.get("sha256") != payload_hash(row)


def sync_tool(store: ToolStore, action: type[TypedToolAction[Any]], *, force: bool = False) -> ToolSync:
    """Write (or keep) one action's row (see the module doc)."""
    tool_id, generated = action.default_tool_id(), generated_payload(action)
    name, row = action_path(action), store.get_payload(tool_id)

    def result(status: str, detail: str = "") -> ToolSync:
        return ToolSync(tool_id=tool_id, action=name, status=status, detail=detail)

    if row is None:
        store.put(tool_id, generated)
        return result(CREATED)
    same = payload_hash(row) == payload_hash(generated)
    if _is_hand_edited(row) and not force:
        if same:
            return result(KEPT, "edited by hand; the same as the generated schema")
        logger.warning(
            "tool %r was edited by hand and differs from the schema %s generates; the row wins "
            "(agentloop tools sync --force overwrites it)",
            tool_id,
            name,
        )
        return result(DRIFTED, f"edited by hand and differs from the schema {name} generates; kept")
    if same and row.get(MARKER) == generated[MARKER]:
        return result(UNCHANGED)
    store.put(tool_id, generated)
    return result(UPDATED)


def check_tool(store: ToolStore, action: type[TypedToolAction[Any]]) -> ToolSync:
    """Whether ``action``'s row differs from its generated schema; nothing is written."""
    tool_id, generated = action.default_tool_id(), generated_payload(action)
    name, row = action_path(action), store.get_payload(tool_id)
    if row is None:
        return ToolSync(
            tool_id=tool_id, action=name, status=FROM_TYPE, detail="no row: the type's schema is sent"
        )
    if payload_hash(row) == payload_hash(generated):
        return ToolSync(tool_id=tool_id, action=name, status=UNCHANGED)
    how = "edited by hand" if _is_hand_edited(row) else "generated from an older type"
    return ToolSync(
        tool_id=tool_id, action=name, status=DRIFTED, detail=f"{how}; differs from {name}'s schema"
    )


def check_tools(store: ToolStore, actions: Iterable[type[TypedToolAction[Any]]]) -> list[ToolSync]:
    """:func:`check_tool` for each of ``actions`` (see the module doc)."""
    return [check_tool(store, action) for action in dict.fromkeys(actions)]


def sync_tools(
    store: ToolStore, actions: Iterable[type[TypedToolAction[Any]]], *, force: bool = False
) -> list[ToolSync]:
    """Write the generated schemas of ``actions`` to ``store`` (see the module doc).

    Raises ``ValueError`` when two actions would write different schemas under one id.
    """
    by_id: dict[str, type[TypedToolAction[Any]]] = {}
    for action in actions:
        tool_id = action.default_tool_id()
        other = by_id.setdefault(tool_id, action)
        if other is not action and payload_hash(other.tool_payload()) != payload_hash(action.tool_payload()):
            raise ValueError(
                f"{action_path(other)} and {action_path(action)} both generate tool {tool_id!r} with "
                "different schemas: give one of them its own tool_id"
            )
    return [sync_tool(store, action, force=force) for action in by_id.values()]


def _is_typed(value: object) -> bool:
    return (
        isinstance(value, type)
        and issubclass(value, TypedToolAction)
        and value.output_type is not None
        and not inspect.isabstract(value)
    )


def _actions_of(runnable: type) -> list[type]:
    """The action classes a runnable class holds: an action stage's, a loop's registry's."""
    if issubclass(runnable, BaseActionStage):
        return [runnable.action]
    if issubclass(runnable, BaseAgentLoop):
        try:
            return [type(action) for action in runnable.create(context=None).registry]
        except Exception:  # the registry needs the real context: the module scan may still find them
            logger.info("the actions of %s need a context; not read from its registry", runnable.__qualname__)
    return []


def typed_actions(
    registry: RunnableRegistry, modules: Sequence[str] = ()
) -> list[type[TypedToolAction[Any]]]:
    """The typed forced-tool actions of a deployment (see the module doc), each once, in order."""
    found: dict[type, None] = {}
    for name in registry.names:
        for action in _actions_of(registry.get(name).runnable):
            if _is_typed(action):
                found.setdefault(action, None)
    for module_name in modules:
        for value in vars(importlib.import_module(module_name)).values():
            if _is_typed(value):
                found.setdefault(value, None)
    return list(found)

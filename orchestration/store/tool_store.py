"""The ``AiTool`` store: tool schema payloads by id.

A forced-tool action reads its schema with ``context.tool_store.get_payload(id)``
(see :class:`actions.ForcedToolAction`). A payload is the JSON object a model
API takes as a tool::

    {"name": "plan_record_search", "description": "...",
     "parameters": {"type": "object", "properties": {...}, "required": [...]}}

:meth:`put` validates it; :meth:`get_payload` returns ``None`` for a missing id
and for a stored row that does not parse as such an object (rows written
around the store), so a broken row is a missing tool, never a crash.
"""

from __future__ import annotations

import builtins
import json
import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import delete, select

from orchestration.store.jsondata import find_non_json, to_json_value
from orchestration.store.sqlbase import SqlStoreBase
from orchestration.store.tables import AiTool, utcnow

logger = logging.getLogger(__name__)

TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""Tool names the OpenAI API (and compatible servers) accept."""


def validate_tool_payload(payload: Mapping[str, Any] | str | bytes) -> dict[str, Any]:
    """The payload as a plain dict when it is a valid tool schema; ``ValueError`` saying why not.

    A JSON string is parsed first. Required: ``name`` (1-64 of ``A-Za-z0-9_-``)
    and ``parameters`` (a JSON Schema object with ``"type": "object"``);
    ``description`` is optional but must be a string.
    """
    if isinstance(payload, str | bytes):
        try:
            payload = json.loads(payload)
        except ValueError as error:
            raise ValueError(f"tool payload is not valid JSON: {error}") from error
    if not isinstance(payload, Mapping):
        raise ValueError(f"tool payload must be a JSON object, not {type(payload).__name__}")
    name = payload.get("name")
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.match(name):
        raise ValueError(f"tool payload needs a 'name' of 1-64 letters, digits, '_' or '-', got {name!r}")
    description = payload.get("description")
    if description is not None and not isinstance(description, str):
        raise ValueError(f"tool {name!r}: 'description' must be a string, not {type(description).__name__}")
    parameters = payload.get("parameters")
    if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
        raise ValueError(f'tool {name!r}: \'parameters\' must be a JSON Schema object with "type": "object"')
    problem = find_non_json(payload, "payload")
    if problem is not None:
        raise ValueError(f"tool {name!r}: payload must be JSON, but {problem}")
    result: dict[str, Any] = to_json_value(payload, what=f"tool {name!r} payload")
    return result


def _parsed_or_none(tool_id: str, payload: Any) -> dict[str, Any] | None:
    try:
        return validate_tool_payload(payload)
    except ValueError as error:
        logger.warning("tool %r in the tool store is unusable: %s", tool_id, error)
        return None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolRecord:
    """One stored tool: its id, the tool's ``name``, its payload as stored and timestamps (UTC).

    ``payload`` is a dict for every tool written through a store; a row written
    around the store may hold anything (``get_payload`` reads it as missing).
    """

    id: str
    name: str
    payload: Any
    created_at: datetime
    updated_at: datetime


@runtime_checkable
class ToolStore(Protocol):
    """Tool schema payloads by id (:class:`SqlToolStore`, :class:`InMemoryToolStore`)."""

    def get_payload(self, tool_id: str) -> dict[str, Any] | None:
        """The tool's payload; ``None`` when missing or unparsable."""
        ...

    def put(self, tool_id: str, payload: Mapping[str, Any] | str | bytes) -> None:
        """Store (or replace) a validated payload under ``tool_id``."""
        ...

    def list(self) -> builtins.list[ToolRecord]:
        """Every stored tool, by id."""
        ...

    def delete(self, tool_id: str) -> bool:
        """Remove the tool; ``False`` when there was none."""
        ...


class SqlToolStore(SqlStoreBase):
    """The ``ai_tools`` table behind the :class:`ToolStore` protocol."""

    def get_payload(self, tool_id: str) -> dict[str, Any] | None:
        """The tool's payload; ``None`` when missing or unparsable."""
        with self._sessions() as session:
            row = session.get(AiTool, tool_id)
            return None if row is None else _parsed_or_none(tool_id, row.payload)

    def put(self, tool_id: str, payload: Mapping[str, Any] | str | bytes) -> None:
        """Store (or replace) a validated payload under ``tool_id``."""
        valid = validate_tool_payload(payload)
        now = utcnow()
        insert = self._insert(AiTool).values(
            id=tool_id, name=valid["name"], payload=valid, created_at=now, updated_at=now
        )
        statement = insert.on_conflict_do_update(
            index_elements=["id"],
            set_={"name": insert.excluded.name, "payload": insert.excluded.payload, "updated_at": now},
        )
        with self._sessions.begin() as session:
            session.execute(statement)

    def list(self) -> builtins.list[ToolRecord]:
        """Every stored tool, by id (unparsable payloads included as stored)."""
        with self._sessions() as session:
            rows = session.execute(select(AiTool).order_by(AiTool.id)).scalars()
            return [
                ToolRecord(
                    id=row.id,
                    name=row.name,
                    payload=row.payload,
                    created_at=row.created_at,
                    updated_at=row.updated_at,
                )
                for row in rows
            ]

    def delete(self, tool_id: str) -> bool:
        """Remove the tool; ``False`` when there was none."""
        with self._sessions.begin() as session:
            return (
                session.execute(delete(AiTool).where(AiTool.id == tool_id).returning(AiTool.id)).first()
                is not None
            )


class InMemoryToolStore:
    """A dict-backed :class:`ToolStore` for tests and offline runs (thread-safe)."""

    def __init__(self, tools: Mapping[str, Mapping[str, Any] | str] | None = None) -> None:
        self._lock = threading.Lock()
        self._tools: dict[str, ToolRecord] = {}
        for tool_id, payload in (tools or {}).items():
            self.put(tool_id, payload)

    def get_payload(self, tool_id: str) -> dict[str, Any] | None:
        """The tool's payload (a copy); ``None`` when missing."""
        with self._lock:
            record = self._tools.get(tool_id)
        return None if record is None else _parsed_or_none(tool_id, record.payload)

    def put(self, tool_id: str, payload: Mapping[str, Any] | str | bytes) -> None:
        """Store (or replace) a validated payload under ``tool_id``."""
        valid = validate_tool_payload(payload)
        now = utcnow()
        with self._lock:
            previous = self._tools.get(tool_id)
            if previous is None:
                record = ToolRecord(
                    id=tool_id, name=valid["name"], payload=valid, created_at=now, updated_at=now
                )
            else:
                record = replace(previous, name=valid["name"], payload=valid, updated_at=now)
            self._tools[tool_id] = record

    def list(self) -> builtins.list[ToolRecord]:
        """Every stored tool, by id."""
        with self._lock:
            records = sorted(self._tools.values(), key=lambda record: record.id)
        return [replace(record, payload=json.loads(json.dumps(record.payload))) for record in records]

    def delete(self, tool_id: str) -> bool:
        """Remove the tool; ``False`` when there was none."""
        with self._lock:
            return self._tools.pop(tool_id, None) is not None

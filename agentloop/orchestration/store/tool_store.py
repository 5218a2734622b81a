"""The tool store: tool schema payloads by id (the ``ai_tools`` table).

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
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from jsonschema import Draft202012Validator, SchemaError, ValidationError, validators
from jsonschema.exceptions import best_match
from sqlalchemy import Engine, Row, delete, select

from agentloop.orchestration.store.dialects import dialect_of, insert, one_statement
from agentloop.orchestration.store.json_values import find_non_json, to_json_value
from agentloop.orchestration.store.retry import StoreRetry, retried
from agentloop.orchestration.store.tables import ai_tools, utcnow

logger = logging.getLogger(__name__)

TOOL_PAYLOAD_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["name", "parameters"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
        "description": {"type": "string"},
        "parameters": {"type": "object", "required": ["type"], "properties": {"type": {"const": "object"}}},
    },
}
"""What a tool payload must look like; ``name`` as the OpenAI API (and compatible servers) accept it."""

_PAYLOAD_VALIDATOR = Draft202012Validator(TOOL_PAYLOAD_SCHEMA)
_RULES = {
    "name": "needs a 'name' of 1-64 letters, digits, '_' or '-'",
    "description": "'description' must be a string",
    "parameters": '\'parameters\' must be a JSON Schema object with "type": "object"',
}


def _offending_key(error: ValidationError) -> str:
    """The payload's key an error is about: where it sits, or the required key that is missing."""
    if error.path:
        return str(error.path[0])
    required, instance = error.validator_value, error.instance
    if error.validator == "required" and isinstance(required, list) and isinstance(instance, Mapping):
        return next((str(key) for key in required if key not in instance), "")
    return ""


def validate_tool_payload(payload: Mapping[str, Any] | str | bytes) -> dict[str, Any]:
    """The payload as a plain dict when it is a valid tool schema; ``ValueError`` saying why not.

    A JSON string is parsed first. Required: ``name`` (1-64 of ``A-Za-z0-9_-``)
    and ``parameters``, a JSON Schema (checked against its meta-schema, Draft
    2020-12 unless it names another in ``$schema``) with ``"type": "object"``;
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
    who = f"tool {name!r}" if isinstance(name, str) else "tool payload"
    problem = find_non_json(payload, "payload")
    if problem is not None:
        raise ValueError(f"{who}: payload must be JSON, but {problem}")
    mismatch = best_match(_PAYLOAD_VALIDATOR.iter_errors(payload))
    if mismatch is not None:
        fix = _RULES.get(_offending_key(mismatch), "is not a tool payload")
        raise ValueError(f"{who}: {fix} ({mismatch.message})")
    parameters = payload["parameters"]
    try:
        validators.validator_for(parameters, default=Draft202012Validator).check_schema(parameters)
    except SchemaError as schema_error:
        where = "/".join(str(part) for part in schema_error.path) or "its top level"
        raise ValueError(
            f"{who}: 'parameters' is not a valid JSON Schema at {where} ({schema_error.message})"
        ) from schema_error
    result: dict[str, Any] = to_json_value(payload, what=f"{who} payload")
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


def _tool_record(row: Row[Any]) -> ToolRecord:
    return ToolRecord(**row._mapping)


class SqlToolStore:
    """The ``ai_tools`` table behind the :class:`ToolStore` protocol."""

    def __init__(self, engine: Engine, *, retry: StoreRetry | None = None) -> None:
        self.engine = engine
        """The engine the store uses (``dispose()`` it when done with the store)."""
        self.dialect = dialect_of(engine)
        """``"sqlite"`` or ``"postgresql"``."""
        self.retry = retry or StoreRetry()
        """Every call is tried again while the database is unreachable, as a run store call is."""

    @retried
    def get_payload(self, tool_id: str) -> dict[str, Any] | None:
        """The tool's payload; ``None`` when missing or unparsable."""
        with one_statement(self.engine) as connection:
            row = connection.execute(select(ai_tools.c.payload).where(ai_tools.c.id == tool_id)).first()
        return None if row is None else _parsed_or_none(tool_id, row.payload)

    @retried
    def put(self, tool_id: str, payload: Mapping[str, Any] | str | bytes) -> None:
        """Store (or replace) a validated payload under ``tool_id``."""
        valid = validate_tool_payload(payload)
        now = utcnow()
        upsert = insert(ai_tools, self.dialect).values(
            id=tool_id, name=valid["name"], payload=valid, created_at=now, updated_at=now
        )
        statement = upsert.on_conflict_do_update(
            index_elements=["id"],
            set_={"name": upsert.excluded.name, "payload": upsert.excluded.payload, "updated_at": now},
        )
        with self.engine.begin() as connection:
            connection.execute(statement)

    @retried
    def list(self) -> builtins.list[ToolRecord]:
        """Every stored tool, by id (unparsable payloads included as stored)."""
        with one_statement(self.engine) as connection:
            return [_tool_record(row) for row in connection.execute(select(ai_tools).order_by(ai_tools.c.id))]

    @retried
    def delete(self, tool_id: str) -> bool:
        """Remove the tool; ``False`` when there was none."""
        statement = delete(ai_tools).where(ai_tools.c.id == tool_id).returning(ai_tools.c.id)
        with self.engine.begin() as connection:
            return connection.execute(statement).first() is not None


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

"""Checking that a value can be stored as JSON, and naming what cannot.

Everything the store keeps (run input and output, progress events, checkpoint
state, loop results) goes through :func:`to_json_value`. It accepts exactly
what survives a JSON round-trip unchanged (``dict`` with ``str`` keys, ``list``,
``str``, ``int``, finite ``float``, ``bool``, ``None``; tuples are accepted and
come back as lists) and that every database stores (no NUL character in a
string or key: PostgreSQL's ``jsonb`` holds none), and raises :class:`~actions.StateNotSerializableError`
naming the offending value's type and where it sits otherwise. The store never
pickles. :func:`json_text` writes such values out for the PostgreSQL driver.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from agentloop.actions import StateNotSerializableError

try:  # the PostgreSQL extra's (``agentloop[postgres]``); without it the standard library's encoder
    import orjson as _orjson
except ImportError:  # pragma: no cover - installed with the extra the PostgreSQL store needs
    _orjson = None  # type: ignore[assignment]

JsonValue = Any
"""A value made of JSON types only (``dict``/``list``/``str``/``int``/``float``/``bool``/``None``)."""

_SCALARS = (int, bool, type(None))
_NUL = "\x00"
_FLAT = frozenset(_SCALARS)


def find_non_json(value: object, where: str = "value") -> str | None:
    """A sentence naming the first part of ``value`` JSON cannot carry; ``None`` when all of it can."""
    if isinstance(value, str):
        return f"{where} contains a NUL character, which no database stores" if _NUL in value else None
    if isinstance(value, _SCALARS):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} is the float {value!r} (JSON has no NaN/Infinity)"
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            problem = find_non_json(item, f"{where}[{index}]")
            if problem is not None:
                return problem
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} has a key {key!r} of type {type(key).__qualname__} (JSON keys are strings)"
            if _NUL in key:
                return f"{where} has a key with a NUL character, which no database stores"
            problem = find_non_json(item, f"{where}[{key!r}]")
            if problem is not None:
                return problem
        return None
    kind = type(value)
    return f"{where} is of type {kind.__module__}.{kind.__qualname__}, which JSON cannot carry"


def to_json_value(value: object, *, what: str) -> JsonValue:
    """A normalised copy of ``value`` (tuples become lists) as it will be read back.

    Raises :class:`~actions.StateNotSerializableError` when ``value`` is not
    JSON data; ``what`` names the value in the message (e.g. ``"checkpoint state"``).
    """
    try:
        problem = find_non_json(value)
    except RecursionError:
        problem = "it is nested too deeply or contains itself"
    if problem is not None:
        raise StateNotSerializableError(
            f"{what} must be JSON-serialisable (dicts with string keys, lists, str, int, float, bool, "
            f"None) but {problem}"
        )
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as error:  # e.g. a cycle or absurd nesting
        raise StateNotSerializableError(f"{what} must be JSON-serialisable: {error}") from error


def flat_json_copy(value: Mapping[Any, Any], _nested: bool = False) -> dict[str, Any] | None:
    """What :func:`to_json_value` returns for ``value``, found without a walk and a round trip when
    ``value`` is flat: string keys, each value a plain ``str`` without NUL, ``int``, ``bool``,
    ``None``, finite ``float``, an empty ``list`` or a ``dict`` that is flat itself and holds no
    ``dict`` (a progress event with no data, or data such as ``{"stopped_by": "complete"}``);
    ``None`` for anything else, which the caller checks the long way."""
    copy: dict[str, Any] = {}
    for key, item in value.items():
        kind = type(item)
        if type(key) is not str or _NUL in key:
            return None
        if kind is str:
            if _NUL in item:
                return None
        elif kind is float:
            if not math.isfinite(item):
                return None
        elif kind is dict and item:
            if _nested:
                return None
            item = flat_json_copy(item, True)
            if item is None:
                return None
        elif kind is dict or kind is list:
            if item:
                return None
            item = kind()
        elif kind not in _FLAT:
            return None
        copy[key] = item
    return copy


def json_text(value: Any) -> bytes | str:
    """``value`` as JSON text, for psycopg's JSON parameters (the store's engines on PostgreSQL).

    orjson's, several times faster than the standard library's on the store's large parameters (a
    pack's events, its loops' results and checkpoints, one JSON array each), where it says the
    same: the standard library's where orjson refuses the value (an integer past 64 bits, a key
    that is not a string, a lone surrogate), and where its text holds a ``null``, which may be a NaN
    or an infinity orjson wrote as ``null``: the standard library writes ``NaN``, which PostgreSQL
    refuses, so such a value is never stored as ``null`` (:func:`to_json_value` refuses it before
    it gets here)."""
    try:
        text = None if _orjson is None else _orjson.dumps(value)
    except TypeError:
        text = None
    return text if text is not None and b"null" not in text else json.dumps(value)

"""``OfflineModel``: a deterministic model that needs no key and no network.

It answers every request with schema-valid output: a forced tool call gets
arguments generated from the tool's JSON Schema (or from a per-tool
*responder* the application registers, for domain-meaningful answers); a free
choice calls the first offered tool once, then ``finish``. Text it writes is
labelled ``[offline model]`` so nobody mistakes it for a real model's words.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentloop.actions.model import AiResponse, FunctionCall, ModelRequest
from agentloop.actions.usage import Usage
from agentloop.orchestration.llm.base import BaseProcessor

LABEL = "[offline model]"

#: ``responder(tool, instruction, history) -> arguments`` for one tool name.
Responder = Callable[[Mapping[str, Any], str, Sequence[Mapping[str, Any]]], Mapping[str, Any]]


def example_from_schema(schema: Mapping[str, Any], *, name: str = "value") -> Any:
    """A deterministic value that satisfies ``schema`` (the common JSON Schema subset)."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example_from_schema(schema[key][0], name=name)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part)
        return example_from_schema(merged, name=name)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties: Mapping[str, Any] = schema.get("properties", {})
        return {key: example_from_schema(spec, name=key) for key, spec in properties.items()}
    if kind == "array":
        item_schema = schema.get("items", {"type": "string"})
        count = max(int(schema.get("minItems", 1)), 1)
        if "maxItems" in schema:
            count = min(count, int(schema["maxItems"]))
        return [example_from_schema(item_schema, name=name) for _ in range(count)]
    if kind in ("integer", "number"):
        return _example_number(schema, integer=kind == "integer")
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = f"{LABEL} {name}"
    min_length, max_length = int(schema.get("minLength", 0)), schema.get("maxLength")
    text = text.ljust(min_length, ".")
    return text if max_length is None else text[: int(max_length)]


def _example_number(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    """The lower bound (just above it when exclusive), else 0, moved inside the upper bound."""
    low = _bound(schema, "minimum", "exclusiveMinimum", lower=True)
    high = _bound(schema, "maximum", "exclusiveMaximum", lower=False)
    if integer:
        first = None if low is None else (math.floor(low[0]) + 1 if low[1] else math.ceil(low[0]))
        last = None if high is None else (math.ceil(high[0]) - 1 if high[1] else math.floor(high[0]))
        value = 0 if first is None else first
        return value if last is None else min(value, last)
    number = 0.0 if low is None else low[0] + (0.5 if low[1] else 0)
    if high is not None and (number > high[0] or (high[1] and number >= high[0])):
        if low is None:
            number = high[0] - (0.5 if high[1] else 0)
        else:
            number = (low[0] + high[0]) / 2 if high[1] or low[1] else high[0]
    return float(number)


def _bound(
    schema: Mapping[str, Any], inclusive: str, exclusive: str, *, lower: bool
) -> tuple[float, bool] | None:
    """The tightest of a schema's inclusive and exclusive bounds on one side, as ``(value, exclusive)``.

    Draft 4 spelled an exclusive bound as ``exclusiveMinimum: true`` beside ``minimum``.
    """
    flag = schema.get(exclusive)
    candidates: list[tuple[float, bool]] = []
    if isinstance(flag, bool):
        if schema.get(inclusive) is not None:
            candidates.append((schema[inclusive], flag))
    else:
        if schema.get(inclusive) is not None:
            candidates.append((schema[inclusive], False))
        if flag is not None:
            candidates.append((flag, True))
    if not candidates:
        return None
    if lower:
        return max(candidates, key=lambda bound: (bound[0], bound[1]))
    return min(candidates, key=lambda bound: (bound[0], not bound[1]))


def estimate_usage(*, instruction: str, history: Sequence[Any], output: str) -> Usage:
    """Token usage at about four characters a token, so budgets work offline too."""
    prompt = len(instruction) + len(json.dumps(list(history), default=str))
    return Usage(input_tokens=max(1, prompt // 4), output_tokens=max(1, len(output) // 4))


class OfflineModel(BaseProcessor):
    """A deterministic :class:`~actions.ModelProcessor`; pass ``responders`` for domain answers."""

    model_name = "offline"

    def __init__(self, *, responders: Mapping[str, Responder] | None = None) -> None:
        self.responders = dict(responders or {})
        self.calls = 0

    @property
    def provider_name(self) -> str:
        """``offline``, as metrics label its calls."""
        return "offline"

    async def process(self, request: ModelRequest) -> AiResponse:
        self.calls += 1
        instruction, history = request.instruction, request.history_messages
        by_name = {str(tool["name"]): tool for tool in request.tools}
        forced = request.forced_tool
        if forced is not None:
            if forced not in by_name:
                return AiResponse.failure(f"offline model: forced tool {forced!r} was not offered")
            return self._call(by_name[forced], instruction, history)
        used_tools = any(message.get("role") == "tool" for message in history)
        others = [tool for tool in request.tools if tool["name"] != "finish"]
        if others and not used_tools:
            return self._call(others[0], instruction, history)
        if "finish" in by_name:
            answer = {"answer": f"{LABEL} {self._last_tool_result(history)}"}
            return self._respond(by_name["finish"], answer, instruction, history)
        text = f"{LABEL} no tool needed"
        return AiResponse(
            text=text,
            usage=estimate_usage(instruction=instruction, history=history, output=text),
            model=self.model_name,
        )

    def _call(
        self, tool: Mapping[str, Any], instruction: str, history: Sequence[Mapping[str, Any]]
    ) -> AiResponse:
        responder = self.responders.get(str(tool["name"]))
        if responder is not None:
            arguments = responder(tool, instruction, history)
        else:
            arguments = example_from_schema(tool.get("parameters") or {"type": "object"})
        return self._respond(tool, arguments, instruction, history)

    def _respond(
        self,
        tool: Mapping[str, Any],
        arguments: Any,
        instruction: str,
        history: Sequence[Mapping[str, Any]],
    ) -> AiResponse:
        raw = json.dumps(arguments, sort_keys=True)
        call_id = "call_" + hashlib.sha256(f"{len(history)}:{tool['name']}:{raw}".encode()).hexdigest()[:12]
        return AiResponse(
            function_calls=(FunctionCall(name=str(tool["name"]), arguments=raw, id=call_id),),
            usage=estimate_usage(instruction=instruction, history=history, output=raw),
            model=self.model_name,
        )

    @staticmethod
    def _last_tool_result(history: Sequence[Mapping[str, Any]]) -> str:
        for message in reversed(history):
            if message.get("role") == "tool":
                return str(message.get("content", ""))[:200]
        return "done"

"""The model the worker's record-search agent talks to, over the OpenAI protocol: it answers like
the offline model, except for a question that carries a fault marker, where every call of the run
fails the way a troubled provider fails.

A marker is ``[fault:<kind>]`` anywhere in the user's question; :data:`FAULTS` lists the kinds:
``429`` (rate limited, every retry too), ``500`` (server error), ``timeout`` (no answer before the
client gives up), ``malformed`` (a tool call whose arguments are not JSON) and ``wrong_tool``
(a call to a tool nobody offered).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentloop.examples.record_search.offline import offline_responders
from agentloop.orchestration.testing.servers.openai_server import (
    Reply,
    reply_delay,
    reply_error,
    reply_text,
    reply_tool_call,
)

API_KEY = "sk-faults-suite-key"
#: The worker's model client gives up on a call after this long (``OPENAI_TIMEOUT_SECONDS``) ...
MODEL_TIMEOUT_SECONDS = 1.0
#: ... and retries it this many times (``OPENAI_MAX_RETRIES``).
MODEL_MAX_RETRIES = 1


def _forced_name(body: dict[str, Any]) -> str:
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return str(choice.get("function", {}).get("name", "unknown"))
    tools = body.get("tools") or [{}]
    return str(tools[0].get("function", {}).get("name", "unknown"))


#: Each fault kind and the reply every call of a marked run gets.
FAULTS: dict[str, Callable[[dict[str, Any]], Reply]] = {
    "429": lambda body: reply_error(429, "Rate limit reached", headers={"retry-after-ms": "50"}),
    "500": lambda body: reply_error(500, "The server had an error while processing your request"),
    "timeout": lambda body: reply_delay(MODEL_TIMEOUT_SECONDS + 2.0),
    "malformed": lambda body: reply_tool_call(_forced_name(body), '{"steps": [ {"category_id": '),
    "wrong_tool": lambda body: reply_tool_call("rm_rf", {"path": "/"}),
}


def marker(kind: str) -> str:
    """The text that makes every model call of a run fail with ``kind``."""
    return f"[fault:{kind}]"


#: What a call of the packed scenarios' loops asks (``[packed:<tag>:<iteration>]``), and how long
#: its answer takes (``tests/faults/pack_scenarios.py``).
PACKED_MARKER = "[packed:"
PACKED_LATENCY = 0.2
#: What a call of the guarantee matrix's loops asks (``[cell:<tag>:<iteration>]``,
#: ``tests/workflows/matrix.py``), and the usage its answer reports (input, output tokens).
CELL_MARKER = "[cell:"
CELL_USAGE = (20, 5)


def chaos_responder(body: dict[str, Any]) -> Reply:
    """The fault of the run's marker, else what the offline model would answer (a packed
    scenario's call: ``ok`` after :data:`PACKED_LATENCY`; a matrix cell's: ``ok``, or the forced
    tool's call, with :data:`CELL_USAGE`)."""
    text = json.dumps(body.get("messages", []))
    if PACKED_MARKER in text:
        return reply_delay(PACKED_LATENCY, reply_text("ok"))
    if CELL_MARKER in text:
        forced = isinstance(body.get("tool_choice"), dict)
        answer = reply_tool_call(_forced_name(body), {}, usage=CELL_USAGE) if forced else None
        return reply_delay(PACKED_LATENCY, answer or reply_text("ok", usage=CELL_USAGE))
    for kind, reply in FAULTS.items():
        if marker(kind) in text:
            return reply(body)
    name = _forced_name(body)
    respond = offline_responders()[name]
    messages = body.get("messages") or [{}]
    return reply_tool_call(name, respond(body["tools"][0]["function"], str(messages[0].get("content")), []))

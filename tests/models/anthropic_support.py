"""Helpers of the Anthropic processor tests: the key, and the key a request carried; the tool they
force and the turn they send are both providers' (``openai_support.py``)."""

from __future__ import annotations

from openai_support import FAST, PLAN_TOOL, send, send_forced

from agentloop.orchestration.testing.servers.openai_replies import RecordedRequest

__all__ = ["ANTHROPIC_KEY", "FAST", "PLAN_TOOL", "send", "send_forced", "sent_key"]

ANTHROPIC_KEY = "sk-ant-test-9d2e4b7c1a8f3e6d"


def sent_key(request: RecordedRequest) -> str | None:
    """The key a request carried: ``x-api-key``, or a bearer token (newer SDKs send that)."""
    bearer = request.headers.get("authorization", "")
    return request.headers.get("x-api-key") or (bearer[7:] if bearer.startswith("Bearer ") else None)

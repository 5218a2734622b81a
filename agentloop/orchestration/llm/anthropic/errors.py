"""What a failed Messages API call says: the ``anthropic`` SDK's exceptions as short messages.

The Anthropic processor returns every failure as :meth:`AiResponse.failure`;
:data:`ANTHROPIC_ERRORS` writes its message, as ``sdk_errors.py`` does for both SDKs,
prefixed ``anthropic:``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from anthropic import (
    AnthropicError,
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
)

from agentloop.orchestration.llm.sdk_errors import STATUS_LABELS, SdkErrors

__all__ = ["ANTHROPIC_ERRORS"]


def _body_message(body: Mapping[str, Any]) -> Any:
    """The message of Anthropic's error body ``{"type": "error", "error": {"type", "message"}}``."""
    inner = body.get("error")
    return inner.get("message") if isinstance(inner, Mapping) else body.get("message")


#: The ``anthropic`` SDK's failures (and its 529 ``overloaded``).
ANTHROPIC_ERRORS = SdkErrors(
    provider="anthropic",
    base=AnthropicError,
    status=APIStatusError,
    timeout=APITimeoutError,
    connection=APIConnectionError,
    validation=APIResponseValidationError,
    body_message=_body_message,
    status_labels=MappingProxyType({**STATUS_LABELS, 529: "overloaded"}),
)

"""What a failed Chat Completions call says: the ``openai`` SDK's exceptions as short messages.

The processor returns every failure as :meth:`AiResponse.failure`;
:data:`OPENAI_ERRORS` writes its message, as ``sdk_errors.py`` does for both SDKs,
prefixed ``openai:``.
"""

from __future__ import annotations

from openai import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    OpenAIError,
)

from agentloop.orchestration.llm.sdk_errors import SdkErrors

__all__ = ["OPENAI_ERRORS"]

#: The ``openai`` SDK's failures; its error bodies carry ``{"message": ...}``.
OPENAI_ERRORS = SdkErrors(
    provider="openai",
    base=OpenAIError,
    status=APIStatusError,
    timeout=APITimeoutError,
    connection=APIConnectionError,
    validation=APIResponseValidationError,
    body_message=lambda body: body.get("message"),
)

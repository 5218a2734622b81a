"""The OpenAI provider: Chat Completions on the official ``openai`` SDK.

:mod:`~agentloop.orchestration.llm.openai.processor` (``OpenAIProcessor``, on the shared
:class:`~agentloop.orchestration.llm.sdk_processor.SdkProcessor`),
:mod:`~agentloop.orchestration.llm.openai.mapping` (requests and replies to and from the wire shapes),
:mod:`~agentloop.orchestration.llm.openai.stream` (a streamed completion read back) and
:mod:`~agentloop.orchestration.llm.openai.errors` (the SDK's exceptions for ``sdk_errors``).

Every import in the project is absolute, so ``import openai`` anywhere (here too) is the SDK,
never this package.
"""

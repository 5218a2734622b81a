"""The Anthropic provider: the Messages API on the official ``anthropic`` SDK (the ``anthropic`` extra).

:mod:`~agentloop.orchestration.llm.anthropic.processor` (``AnthropicProcessor``, on the shared
:class:`~agentloop.orchestration.llm.sdk_processor.SdkProcessor`),
:mod:`~agentloop.orchestration.llm.anthropic.mapping` (requests and replies to and from the wire
shapes), :mod:`~agentloop.orchestration.llm.anthropic.stream` (a streamed message read back) and
:mod:`~agentloop.orchestration.llm.anthropic.errors` (the SDK's exceptions for ``sdk_errors``).

Importing this package loads no SDK; every import in the project is absolute, so
``import anthropic`` anywhere (here too) is the SDK, never this package.
"""

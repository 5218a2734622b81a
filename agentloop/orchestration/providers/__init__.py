"""The model providers a deployment can run with: one row each in
:mod:`~agentloop.orchestration.providers.table`.

Plain data that loads nothing: the settings, :class:`~agentloop.orchestration.llm.provider.ModelProvider`,
:func:`~agentloop.orchestration.llm.provider.describe_processor`, the ``agentloop`` front and the tests
read it, so adding a provider is its folder under ``llm/`` plus one row (``docs/development.md``).
"""

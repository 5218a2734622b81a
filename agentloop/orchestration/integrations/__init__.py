"""Other agent frameworks' agents run as runnables: ``pydantic_ai/`` (the ``pydantic-ai`` extra).

Nothing here is imported by the core nor at ``import agentloop`` time: the front loads
:func:`~agentloop.orchestration.integrations.pydantic_ai.pydantic_ai_runnable` on first use.
"""

"""pydantic-ai agents run durably as runnables (the ``pydantic-ai`` extra).

- :func:`pydantic_ai_runnable` / :class:`PydanticAIAgent` (``runnable.py``): an existing ``Agent``
  as a runnable, registered and run like any other;
- :class:`DurableSteps` (``steps.py``): the run-time capability that makes each model request and
  each tool call one durable step (metered, rate-limited, reported, journalled);
- :class:`StepJournal` (``journal.py``): the finished steps' results, in the run's checkpoint.
"""

from agentloop.orchestration.integrations.pydantic_ai.journal import StepJournal
from agentloop.orchestration.integrations.pydantic_ai.runnable import PydanticAIAgent, pydantic_ai_runnable
from agentloop.orchestration.integrations.pydantic_ai.steps import DurableSteps

__all__ = ["DurableSteps", "PydanticAIAgent", "StepJournal", "pydantic_ai_runnable"]

"""The errors the infrastructure raises on purpose, in one place (the core's are in
``actions/errors.py``). Every one derives from :class:`~agentloop.actions.errors.AgentLoopError`;
the builtin base beside it says which ``except`` clauses written without agentloop in mind also
catch it."""

from __future__ import annotations

from agentloop.actions.errors import AgentLoopError

__all__ = ["ScheduleError", "SettingsError"]


class SettingsError(AgentLoopError, ValueError):
    """A malformed setting; the message names the environment variable and the value."""


class ScheduleError(AgentLoopError, ValueError):
    """A beat schedule entry that cannot be used, with the reason."""

"""Loops: the runnable contract, progress events and the iteration engine."""

from agentloop.loops.ai_driven import AiDrivenAgentLoop
from agentloop.loops.base import BaseAgentLoop
from agentloop.loops.contract import ProgressCallback, Runnable, RunnableBase
from agentloop.loops.procedural import ProceduralAgentLoop
from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.loops.run_outcome import DegradationRecorder, RunOutcome
from agentloop.loops.runner import InlineAgentRunner
from agentloop.loops.scope import (
    CancellationToken,
    CancelSignal,
    Checkpointer,
    RunScope,
    current_scope,
    new_run_id,
    use_scope,
)

__all__ = [
    "AiDrivenAgentLoop",
    "BaseAgentLoop",
    "CancelSignal",
    "CancellationToken",
    "Checkpointer",
    "DegradationRecorder",
    "InlineAgentRunner",
    "ProceduralAgentLoop",
    "ProgressCallback",
    "ProgressEvent",
    "ProgressStatus",
    "RunOutcome",
    "RunScope",
    "Runnable",
    "RunnableBase",
    "current_scope",
    "new_run_id",
    "use_scope",
]

"""Loops: the runnable contract, progress events and the iteration engine."""

from loops.ai_driven import AiDrivenAgentLoop
from loops.base import BaseAgentLoop
from loops.contract import ProgressCallback, Runnable, RunnableBase
from loops.outcome import DegradationRecorder, RunOutcome
from loops.procedural import ProceduralAgentLoop
from loops.progress import ProgressEvent, ProgressStatus
from loops.runner import InlineAgentRunner
from loops.scope import (
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

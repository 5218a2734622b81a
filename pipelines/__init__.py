"""Pipelines: stages in order, action stages, and composites that fan out and merge."""

from pipelines.action_stage import BaseActionStage, step
from pipelines.composite import BaseCompositeAgent, Branch, BranchResult, FailurePolicy
from pipelines.pipeline import BaseAgentPipeline

__all__ = [
    "BaseActionStage",
    "BaseAgentPipeline",
    "BaseCompositeAgent",
    "Branch",
    "BranchResult",
    "FailurePolicy",
    "step",
]

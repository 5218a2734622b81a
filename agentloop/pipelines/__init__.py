"""Pipelines: stages in order, action stages, and composites that fan out and merge."""

from agentloop.pipelines.action_stage import BaseActionStage, step
from agentloop.pipelines.composite import BaseCompositeAgent, Branch, BranchResult, FailurePolicy
from agentloop.pipelines.pipeline import BaseAgentPipeline

__all__ = [
    "BaseActionStage",
    "BaseAgentPipeline",
    "BaseCompositeAgent",
    "Branch",
    "BranchResult",
    "FailurePolicy",
    "step",
]

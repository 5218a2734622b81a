"""The record-search agent's steps: an intent gate, a planner, an executor, a composer."""

from agentloop.examples.record_search.actions.base import BaseRecordSearchAction
from agentloop.examples.record_search.actions.classify_intent import ClassifySearchIntentAction
from agentloop.examples.record_search.actions.compose_answer import ComposeAnswerAction, describe_result
from agentloop.examples.record_search.actions.execute_plan import ExecuteSearchPlanAction
from agentloop.examples.record_search.actions.plan_search import PlanSearchAction

__all__ = [
    "BaseRecordSearchAction",
    "ClassifySearchIntentAction",
    "ComposeAnswerAction",
    "ExecuteSearchPlanAction",
    "PlanSearchAction",
    "describe_result",
]

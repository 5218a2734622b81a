"""The record-search agent: plan -> execute -> compose over a real SQL database.

See :mod:`agentloop.examples.record_search.loop` for the procedure,
:mod:`agentloop.examples.record_search.generator` for running it in-process, and
:mod:`agentloop.examples.record_search.workflows` for the Celery workflows (importing
this package registers ``record_search.ask`` and ``record_search.demo``).
"""

from agentloop.examples.record_search.actions import (
    BaseRecordSearchAction,
    ClassifySearchIntentAction,
    ComposeAnswerAction,
    ExecuteSearchPlanAction,
    PlanSearchAction,
    describe_result,
)
from agentloop.examples.record_search.catalog import (
    SEARCHABLE_CATEGORIES,
    CategoryField,
    CategoryRelation,
    SearchableCategory,
    find_category,
)
from agentloop.examples.record_search.context import RecordSearchContext
from agentloop.examples.record_search.generator import RecordSearchGenerator, default_processor
from agentloop.examples.record_search.loop import (
    MODEL_UNAVAILABLE_MESSAGE,
    NO_PLAN_MESSAGE,
    RecordSearchAgentLoop,
)
from agentloop.examples.record_search.offline import create_offline_model, offline_responders
from agentloop.examples.record_search.plan import validate_plan
from agentloop.examples.record_search.resources import RecordSearchResources, open_resources, shared_resources
from agentloop.examples.record_search.result import RecordSearchBackend, SearchResult
from agentloop.examples.record_search.sample_data import build_sample_database, load_tools
from agentloop.examples.record_search.service import RecordSearchService
from agentloop.examples.record_search.tools import (
    CLASSIFY_INTENT_TOOL_ID,
    COMPOSE_ANSWER_TOOL_ID,
    PLAN_SEARCH_TOOL_ID,
    TOOL_PAYLOADS,
)
from agentloop.examples.record_search.workflows import (
    ASK,
    DEMO,
    DEMO_QUESTIONS,
    RecordSearchBatch,
    RecordSearchDemo,
    RecordSearchStage,
    SummarizeAnswers,
    SummarizeAnswersAction,
    build_context,
)

__all__ = [
    "ASK",
    "BaseRecordSearchAction",
    "CLASSIFY_INTENT_TOOL_ID",
    "COMPOSE_ANSWER_TOOL_ID",
    "CategoryField",
    "CategoryRelation",
    "ClassifySearchIntentAction",
    "ComposeAnswerAction",
    "DEMO",
    "DEMO_QUESTIONS",
    "ExecuteSearchPlanAction",
    "MODEL_UNAVAILABLE_MESSAGE",
    "NO_PLAN_MESSAGE",
    "PLAN_SEARCH_TOOL_ID",
    "PlanSearchAction",
    "RecordSearchAgentLoop",
    "RecordSearchBackend",
    "RecordSearchBatch",
    "RecordSearchContext",
    "RecordSearchDemo",
    "RecordSearchGenerator",
    "RecordSearchResources",
    "RecordSearchService",
    "RecordSearchStage",
    "SEARCHABLE_CATEGORIES",
    "SearchResult",
    "SearchableCategory",
    "SummarizeAnswers",
    "SummarizeAnswersAction",
    "TOOL_PAYLOADS",
    "build_context",
    "build_sample_database",
    "create_offline_model",
    "default_processor",
    "describe_result",
    "find_category",
    "load_tools",
    "offline_responders",
    "open_resources",
    "shared_resources",
    "validate_plan",
]

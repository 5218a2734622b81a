"""Actions: one step of an agent, and the registry a loop performs them from."""

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.base import BaseAgentAction
from agentloop.actions.caching import InMemoryStepCache, StepCache, step_cache_key, use_step_cache
from agentloop.actions.context_values import context_value
from agentloop.actions.degradation import (
    DegradationSink,
    ModelFailure,
    ModelFailurePolicy,
    report_model_failure,
    use_degradation_sink,
)
from agentloop.actions.errors import (
    AgentLoopError,
    BranchFailedError,
    InvalidAnswerError,
    InvalidModelOutputError,
    ModelUnavailableError,
    NoOneToAskError,
    QuestionExpiredError,
    RunCancelledError,
    RunDeadlineExceededError,
    RunStoppedError,
    StateNotSerializableError,
    TokenBudgetExceededError,
    ToolUnavailableError,
    UnknownActionError,
)
from agentloop.actions.forced_tool import ForcedToolAction, OutputRejection
from agentloop.actions.human import (
    CallbackChannel,
    HumanChannel,
    Question,
    QuestionKind,
    ask_human,
    check_answer,
    use_human_channel,
)
from agentloop.actions.model import AiResponse, FunctionCall, ModelProcessor, ModelRequest
from agentloop.actions.prompt import embed_user_fields, embed_user_text
from agentloop.actions.recording import InMemoryRecording, RecordedEntry, RecordingTap
from agentloop.actions.registry import AgentActionRegistry
from agentloop.actions.schema import tool_schema
from agentloop.actions.step_events import (
    StepEvent,
    StepEventSink,
    report_step_event,
    step_events_wanted,
    use_step_events,
)
from agentloop.actions.typed import TypedAction, TypedToolAction
from agentloop.actions.usage import (
    CacheUsage,
    InMemoryUsageMeter,
    Usage,
    UsageMeter,
    check_budget,
    current_meter,
    report_usage,
    use_meter,
)

__all__ = [
    "AgentActionRegistry",
    "AgentLoopError",
    "AiResponse",
    "BaseAgentAction",
    "BranchFailedError",
    "CacheUsage",
    "CallbackChannel",
    "DegradationSink",
    "ForcedToolAction",
    "FunctionCall",
    "HumanChannel",
    "InMemoryRecording",
    "InMemoryStepCache",
    "InMemoryUsageMeter",
    "InvalidAnswerError",
    "InvalidModelOutputError",
    "ModelFailure",
    "ModelFailurePolicy",
    "ModelProcessor",
    "ModelRequest",
    "ModelUnavailableError",
    "NoOneToAskError",
    "OutputRejection",
    "Question",
    "QuestionExpiredError",
    "QuestionKind",
    "RecordedEntry",
    "RecordingTap",
    "RunCancelledError",
    "RunDeadlineExceededError",
    "RunStoppedError",
    "StateNotSerializableError",
    "StepCache",
    "StepEvent",
    "StepEventSink",
    "TokenBudgetExceededError",
    "ToolUnavailableError",
    "TypedAction",
    "TypedToolAction",
    "UnknownActionError",
    "Usage",
    "UsageMeter",
    "ask_human",
    "check_answer",
    "check_budget",
    "context_value",
    "current_meter",
    "embed_user_fields",
    "embed_user_text",
    "maybe_await",
    "report_model_failure",
    "report_step_event",
    "report_usage",
    "step_cache_key",
    "step_events_wanted",
    "tool_schema",
    "use_degradation_sink",
    "use_human_channel",
    "use_meter",
    "use_step_cache",
    "use_step_events",
]

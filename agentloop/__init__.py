"""agentloop: LLM agent loops and composite agent workflows whose procedure is code.

Everything an application uses is importable from here::

    import agentloop

    class CountTo(agentloop.BaseAgentLoop): ...

    runner = agentloop.InlineAgentRunner.create(runnable=CountTo)
    print(runner.request_sync(input=3))

The modules behind these names (``actions``, ``loops``, ``pipelines``,
``orchestration``) are the implementation; ``agentloop.__all__`` is the public
surface, and ``tests/test_exports.py`` keeps it honest. The names whose
modules import Celery, SQLAlchemy, pydantic-settings or a model SDK
(:func:`create_app`, :class:`CeleryAgentRunner`, :class:`OpenAIProcessor`,
:func:`load_settings`, ...) are imported on first use, from one table, so
``import agentloop`` stays cheap for in-process use; everything else, every
error included, is imported at once.

Errors
------

Every error the framework raises on purpose derives from
:class:`AgentLoopError`; a builtin base in brackets says which ``except``
clauses written without agentloop in mind also catch it. The core's errors are
defined in ``actions/errors.py``, the infrastructure's in ``orchestration/errors.py``::

    AgentLoopError                 root: catch this to catch them all
    ├── UnknownActionError         [KeyError] a loop asked its action registry for an unknown name
    ├── RunStoppedError            the run ended before it finished; ``status`` says why
    │   ├── RunCancelledError      cooperative cancellation was requested
    │   └── RunDeadlineExceededError  the whole-run deadline passed
    ├── BranchFailedError          a composite branch failed under the fail-fast policy
    ├── StateNotSerializableError  [TypeError] loop state that JSON cannot carry, or not its state_type
    ├── TokenBudgetExceededError   the run's token budget is spent
    ├── ModelUnavailableError      a step's model call failed and its action's policy is ``fail``
    ├── InvalidModelOutputError    a step's answer stayed invalid after its tries; its policy is ``fail``
    ├── ToolUnavailableError       an MCP server was down, slow or died in a call (``fails_run``: ``fail``)
    │   └── McpUnavailableError    [ConnectionError] the same, raised by an MCP tool's action
    ├── McpToolError               [RuntimeError] an MCP tool answered ``isError``: a tool error for the model
    ├── McpResultRefusedError      [ValueError] an MCP result past ``max_result_bytes``, or malformed
    ├── McpConfigError             [ValueError] an MCP server configured wrongly, or a tool it does not offer
    ├── InvalidAnswerError         an answer to a person's question that does not meet its schema
    ├── QuestionExpiredError       a question's wait ended unanswered and it has no default
    ├── NoOneToAskError            a step asked a question where no one can answer (give ``on_question``)
    ├── UnknownRunnableError       [LookupError] a message named a runnable nobody registered
    ├── UnknownInputProviderError  [LookupError] a batch named an input provider nobody registered
    ├── ContextSpecError           [ValueError] a context spec that is not a JSON object, or was rejected
    ├── LaunchRequestError         [ValueError] ``agentloop.launch`` arguments the wire contract forbids
    ├── InvalidNodeError           [ValueError] an internal task's node is malformed, or of the wrong kind
    ├── RunNotFoundError           [KeyError] no run with that id in the run store
    ├── RunExistsError             [ValueError] a run with that id exists already (a run id names one run)
    ├── RunAlreadyEndedError       [ValueError] the run has ended; an ended run is never rewritten
    ├── RunIdTakenError            [ValueError] a launch named the id of another launch's run
    ├── RunOwnershipError          [PermissionError] only the tasks of the launch that owns a run end it
    ├── StoreUnavailableError      [ConnectionError] the run store's database stayed away past the retries
    ├── RateLimitTimeoutError      [TimeoutError] a model call waited too long for a rate-limit slot
    ├── SettingsError              [ValueError] a malformed setting; the message names the variable
    ├── EvaluationInputError       [ValueError] a dataset line or a scorer ``agentloop eval`` cannot use
    ├── ScheduleError              [ValueError] a beat schedule entry that cannot be used
    ├── WorkerStartError           [RuntimeError] an embedded worker did not come up
    ├── UnsendableMessageError     [ValueError] a message a run needs would be refused at the workers' edge
    ├── DeliveryLimitError         [RuntimeError] a message came back unacknowledged past its delivery limit
    ├── ConcurrencyLimitError      [RuntimeError] a run refused or cancelled: its concurrency key was full
    ├── ModelRequestsBlockedError  [RuntimeError] a test tried to reach a real model (see the pytest plugin)
    ├── NetworkBlockedError        [ConnectionRefusedError] a connection off this machine during a replay
    ├── ExternalToolCallsError     [RuntimeError] a pydantic-ai agent deferred a tool call to run outside it
    ├── ReplayedTurnError          [RuntimeError] a replay reached a pydantic-ai request its recording lacks
    └── WorkflowFailedError        a run on Celery failed; ``error_type`` and ``message`` say how

Model faults inside an action are values (``None`` or a declared fallback),
never exceptions: a misbehaving model cannot crash a loop. :class:`~agentloop.actions.human.RunPaused`,
outside the
tree, is no error: like ``asyncio.CancelledError`` it is a ``BaseException``, the signal a
paused run's step raises on Celery so that no ``except Exception`` takes it for a failure.
A step that
returns its fallback ends the run ``degraded`` (the result is still returned; see
:class:`RunOutcome`): a model call that failed after the processor's retries, an
answer still invalid after its tries, a raw request whose reply is a failure. The
action's ``on_model_failure = "fail"`` raises :class:`ModelUnavailableError` instead,
its ``on_invalid_output = "fail"`` :class:`InvalidModelOutputError`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentloop.actions import (
    AgentActionRegistry,
    AgentLoopError,
    AiResponse,
    BaseAgentAction,
    BranchFailedError,
    CacheUsage,
    CallbackChannel,
    DegradationSink,
    ForcedToolAction,
    FunctionCall,
    HumanChannel,
    InMemoryRecording,
    InMemoryStepCache,
    InMemoryUsageMeter,
    InvalidAnswerError,
    InvalidModelOutputError,
    ModelFailure,
    ModelFailurePolicy,
    ModelProcessor,
    ModelRequest,
    ModelUnavailableError,
    NoOneToAskError,
    OutputRejection,
    Question,
    QuestionExpiredError,
    QuestionKind,
    RecordedEntry,
    RecordingTap,
    RunCancelledError,
    RunDeadlineExceededError,
    RunStoppedError,
    StateNotSerializableError,
    StepCache,
    StepEvent,
    StepEventSink,
    TokenBudgetExceededError,
    ToolUnavailableError,
    TypedAction,
    TypedToolAction,
    UnknownActionError,
    Usage,
    UsageMeter,
    ask_human,
    check_answer,
    check_budget,
    context_value,
    current_meter,
    embed_user_fields,
    embed_user_text,
    maybe_await,
    report_model_failure,
    report_step_event,
    report_usage,
    step_cache_key,
    step_events_wanted,
    tool_schema,
    use_degradation_sink,
    use_human_channel,
    use_meter,
    use_step_cache,
    use_step_events,
)
from agentloop.loops import (
    AiDrivenAgentLoop,
    BaseAgentLoop,
    CancellationToken,
    CancelSignal,
    Checkpointer,
    DegradationRecorder,
    InlineAgentRunner,
    ProceduralAgentLoop,
    ProgressCallback,
    ProgressEvent,
    ProgressStatus,
    Runnable,
    RunnableBase,
    RunOutcome,
    RunScope,
    current_scope,
    new_run_id,
    use_scope,
)
from agentloop.orchestration.errors import (
    ConcurrencyLimitError,
    ContextSpecError,
    DeliveryLimitError,
    EvaluationInputError,
    ExternalToolCallsError,
    InvalidNodeError,
    LaunchRequestError,
    McpConfigError,
    McpResultRefusedError,
    McpToolError,
    McpUnavailableError,
    ModelRequestsBlockedError,
    NetworkBlockedError,
    RateLimitTimeoutError,
    ReplayedTurnError,
    RunAlreadyEndedError,
    RunExistsError,
    RunIdTakenError,
    RunNotFoundError,
    RunOwnershipError,
    ScheduleError,
    SettingsError,
    StoreUnavailableError,
    UnknownInputProviderError,
    UnknownRunnableError,
    UnsendableMessageError,
    WorkerStartError,
    WorkflowFailedError,
)
from agentloop.orchestration.evals.verdicts import EvalScore
from agentloop.orchestration.fairness.rules import Concurrency
from agentloop.orchestration.forks import ForkPoint, ForkReport, fork
from agentloop.orchestration.llm.offline import OfflineModel
from agentloop.orchestration.mcp.servers import McpServer
from agentloop.orchestration.providers.table import PROVIDERS
from agentloop.orchestration.registry import RunnableRegistry, input_provider, register
from agentloop.orchestration.replay import ReplayReport, RunRecording, replay
from agentloop.orchestration.runtime.context import StandardContext, StandardContextFactory, standard_context
from agentloop.orchestration.wire import DegradedBody, DegradedResult
from agentloop.pipelines import (
    BaseActionStage,
    BaseAgentPipeline,
    BaseCompositeAgent,
    Branch,
    BranchResult,
    FailurePolicy,
    step,
)

if TYPE_CHECKING:  # the names of _LAZY, each from its module there (tests/test_exports.py checks)
    from agentloop.orchestration.celery_adapter.app import create_app
    from agentloop.orchestration.client import CeleryAgentRunner, RunHandle
    from agentloop.orchestration.integrations.pydantic_ai.runnable import (
        PydanticAIAgent,
        pydantic_ai_runnable,
    )
    from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
    from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
    from agentloop.orchestration.llm.provider import processor_from_env
    from agentloop.orchestration.mcp.tools import McpToolAction, McpToolset
    from agentloop.orchestration.runtime.step_cache import RedisStepCache
    from agentloop.orchestration.settings import Settings, load_settings
    from agentloop.orchestration.store.tool_store import InMemoryToolStore
    from agentloop.orchestration.store.tool_sync import sync_tools

__all__ = [
    "AgentActionRegistry",
    "AgentLoopError",
    "AiDrivenAgentLoop",
    "AiResponse",
    "AnthropicProcessor",
    "BaseActionStage",
    "BaseAgentAction",
    "BaseAgentLoop",
    "BaseAgentPipeline",
    "BaseCompositeAgent",
    "Branch",
    "BranchFailedError",
    "BranchResult",
    "CacheUsage",
    "CallbackChannel",
    "CancelSignal",
    "CancellationToken",
    "CeleryAgentRunner",
    "Checkpointer",
    "Concurrency",
    "ConcurrencyLimitError",
    "ContextSpecError",
    "DegradationRecorder",
    "DegradationSink",
    "DegradedBody",
    "DegradedResult",
    "DeliveryLimitError",
    "EvalScore",
    "EvaluationInputError",
    "ExternalToolCallsError",
    "FailurePolicy",
    "ForcedToolAction",
    "ForkPoint",
    "ForkReport",
    "FunctionCall",
    "HumanChannel",
    "InMemoryRecording",
    "InMemoryStepCache",
    "InMemoryToolStore",
    "InMemoryUsageMeter",
    "InlineAgentRunner",
    "InvalidAnswerError",
    "InvalidModelOutputError",
    "InvalidNodeError",
    "LaunchRequestError",
    "McpConfigError",
    "McpResultRefusedError",
    "McpServer",
    "McpToolAction",
    "McpToolError",
    "McpToolset",
    "McpUnavailableError",
    "ModelFailure",
    "ModelFailurePolicy",
    "ModelProcessor",
    "ModelRequest",
    "ModelRequestsBlockedError",
    "ModelUnavailableError",
    "NetworkBlockedError",
    "NoOneToAskError",
    "OfflineModel",
    "OpenAIProcessor",
    "OutputRejection",
    "ProceduralAgentLoop",
    "ProgressCallback",
    "ProgressEvent",
    "ProgressStatus",
    "PydanticAIAgent",
    "Question",
    "QuestionExpiredError",
    "QuestionKind",
    "RateLimitTimeoutError",
    "RecordedEntry",
    "RecordingTap",
    "RedisStepCache",
    "ReplayReport",
    "ReplayedTurnError",
    "RunAlreadyEndedError",
    "RunCancelledError",
    "RunDeadlineExceededError",
    "RunExistsError",
    "RunHandle",
    "RunIdTakenError",
    "RunNotFoundError",
    "RunOutcome",
    "RunOwnershipError",
    "RunRecording",
    "RunScope",
    "RunStoppedError",
    "Runnable",
    "RunnableBase",
    "RunnableRegistry",
    "ScheduleError",
    "Settings",
    "SettingsError",
    "StandardContext",
    "StandardContextFactory",
    "StateNotSerializableError",
    "StepCache",
    "StepEvent",
    "StepEventSink",
    "StoreUnavailableError",
    "TokenBudgetExceededError",
    "ToolUnavailableError",
    "TypedAction",
    "TypedToolAction",
    "UnknownActionError",
    "UnknownInputProviderError",
    "UnknownRunnableError",
    "UnsendableMessageError",
    "Usage",
    "UsageMeter",
    "WorkerStartError",
    "WorkflowFailedError",
    "ask_human",
    "check_answer",
    "check_budget",
    "context_value",
    "create_app",
    "current_meter",
    "current_scope",
    "embed_user_fields",
    "embed_user_text",
    "fork",
    "input_provider",
    "load_settings",
    "maybe_await",
    "new_run_id",
    "processor_from_env",
    "pydantic_ai_runnable",
    "register",
    "replay",
    "report_model_failure",
    "report_step_event",
    "report_usage",
    "standard_context",
    "step",
    "step_cache_key",
    "step_events_wanted",
    "sync_tools",
    "tool_schema",
    "use_degradation_sink",
    "use_human_channel",
    "use_meter",
    "use_scope",
    "use_step_cache",
    "use_step_events",
]

#: The names whose modules import Celery, SQLAlchemy, pydantic-settings or a model SDK, each with
#: that module: loaded on first access, by ``__getattr__``. The ``if TYPE_CHECKING:`` imports above
#: give them their types and must name the same modules (``tests/test_exports.py`` checks).
_LAZY = {
    # each provider's processor, from the provider table (its module imports the provider's SDK)
    **{row.processor_class: row.processor_module for row in PROVIDERS.values()},
    "CeleryAgentRunner": "agentloop.orchestration.client",
    "InMemoryToolStore": "agentloop.orchestration.store.tool_store",
    "RedisStepCache": "agentloop.orchestration.runtime.step_cache",
    "McpToolAction": "agentloop.orchestration.mcp.tools",
    "McpToolset": "agentloop.orchestration.mcp.tools",
    "PydanticAIAgent": "agentloop.orchestration.integrations.pydantic_ai.runnable",
    "RunHandle": "agentloop.orchestration.client",
    "Settings": "agentloop.orchestration.settings",
    "create_app": "agentloop.orchestration.celery_adapter.app",
    "load_settings": "agentloop.orchestration.settings",
    "processor_from_env": "agentloop.orchestration.llm.provider",
    "sync_tools": "agentloop.orchestration.store.tool_sync",
    "pydantic_ai_runnable": "agentloop.orchestration.integrations.pydantic_ai.runnable",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

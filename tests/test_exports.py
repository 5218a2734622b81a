"""The public surface: what each package's ``__init__`` says users import, and nothing else."""

from __future__ import annotations

import importlib

import pytest

EXPECTED: dict[str, set[str]] = {
    "actions": {
        "AgentActionRegistry",
        "AgentLoopError",
        "AiResponse",
        "BaseAgentAction",
        "BranchFailedError",
        "ForcedToolAction",
        "FunctionCall",
        "InMemoryUsageMeter",
        "ModelProcessor",
        "RunCancelledError",
        "RunDeadlineExceededError",
        "RunStoppedError",
        "StateNotSerializableError",
        "TokenBudgetExceededError",
        "UnknownActionError",
        "Usage",
        "UsageMeter",
        "check_budget",
        "context_value",
        "current_meter",
        "embed_user_fields",
        "embed_user_text",
        "maybe_await",
        "report_usage",
        "use_meter",
    },
    "loops": {
        "AiDrivenAgentLoop",
        "BaseAgentLoop",
        "CancelToken",
        "CancellationToken",
        "Checkpointer",
        "InlineAgentRunner",
        "ProceduralAgentLoop",
        "ProgressCallback",
        "ProgressEvent",
        "ProgressStatus",
        "RunScope",
        "Runnable",
        "RunnableBase",
        "current_scope",
        "new_run_id",
        "use_scope",
    },
    "pipelines": {
        "BaseActionStage",
        "BaseAgentPipeline",
        "BaseCompositeAgent",
        "Branch",
        "BranchResult",
        "FailurePolicy",
    },
    "orchestration.llm": {
        "LocalRateLimiter",
        "OfflineModel",
        "OpenAIProcessor",
        "Permit",
        "RateLimitTimeoutError",
        "RateLimitedProcessor",
        "RateLimiter",
        "RedisRateLimiter",
        "current_permit",
        "describe_processor",
        "limit_key",
        "processor_from_env",
    },
    "orchestration.store": {
        "InMemoryRunStore",
        "InMemoryToolStore",
        "JsonValue",
        "RunNotFoundError",
        "RunRecord",
        "RunStatus",
        "RunStore",
        "SqlRunStore",
        "SqlToolStore",
        "TERMINAL_STATUSES",
        "ToolRecord",
        "ToolStore",
        "create_engine_for",
        "current_revision",
        "database_url",
        "downgrade_database",
        "normalize_url",
        "open_store",
        "session_factory",
        "to_json_value",
        "upgrade_database",
        "validate_tool_payload",
    },
    "orchestration.testing": {
        "ContractReport",
        "FunctionModel",
        "ModelRequest",
        "OfflineModel",
        "ProgressRecorder",
        "ScriptedModel",
        "assert_event_contract",
        "assert_json_value",
        "assert_runnable_shape",
        "check_action",
        "check_loop",
        "check_runnable",
        "error_reply",
        "example_from_schema",
        "text_reply",
        "tool_call",
    },
}


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_a_package_exports_exactly_the_expected_names(package: str) -> None:
    module = importlib.import_module(package)

    assert set(module.__all__) == EXPECTED[package]
    assert len(module.__all__) == len(set(module.__all__)), "a name is listed twice"


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_a_packages_all_is_sorted(package: str) -> None:
    names = importlib.import_module(package).__all__

    assert list(names) == sorted(names)


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_every_exported_name_exists(package: str) -> None:
    module = importlib.import_module(package)

    assert [name for name in module.__all__ if not hasattr(module, name)] == []


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_the_public_classes_and_functions_are_importable_from_the_package_itself(package: str) -> None:
    module = importlib.import_module(package)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", "").startswith(package.split(".")[0])
        and callable(value)
    }

    assert public - set(module.__all__) == set(), "public names missing from __all__"


def test_star_import_gives_exactly_all() -> None:
    for package, expected in EXPECTED.items():
        namespace: dict[str, object] = {}
        exec(f"from {package} import *", namespace)

        assert set(namespace) - {"__builtins__"} == expected, package

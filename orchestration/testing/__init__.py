"""The contract testing kit: model doubles, a progress recorder and contract checks.

Also a pytest plugin (``orchestration.testing.plugin``), registered as the
``agentloop`` entry point, whose fixtures give these to any test suite.
Importing this package does not import Celery.
"""

from actions.model import ModelRequest
from orchestration.llm.offline import OfflineModel, example_from_schema
from orchestration.testing.contract import (
    ContractReport,
    assert_event_contract,
    assert_json_value,
    assert_runnable_shape,
    check_action,
    check_loop,
    check_runnable,
)
from orchestration.testing.doubles import (
    FunctionModel,
    ScriptedModel,
    error_reply,
    text_reply,
    tool_call,
)
from orchestration.testing.recorder import ProgressRecorder

__all__ = [
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
]

"""The testing kit's front: model doubles, local model servers, a progress recorder, contract checks.

A user's test suite imports from here and opts in to the pytest plugin in its ``conftest.py``
(or with ``pytest -p agentloop.testing``)::

    pytest_plugins = ["agentloop.testing"]

The plugin gives the fixtures ``offline_model``, ``scripted_model``, ``function_model``,
``progress_recorder``, ``agentloop_contract`` and ``replay_recording`` (an exported recording
as a regression test, :func:`~agentloop.orchestration.testing.replays.assert_replays`), and
blocks real model requests while tests run
(:mod:`agentloop.orchestration.testing.plugin` says how to allow them). Nothing is loaded into a
pytest session that does not ask for it. ``OpenAICompatibleServer`` and
``AnthropicCompatibleServer`` are local servers that speak the two providers' protocols, for tests
that go through the real SDKs. The reply helpers (``reply_text``, ``reply_tool_call``, ...) script
the OpenAI-protocol server; the Anthropic one's live in
:mod:`agentloop.orchestration.testing.servers.anthropic_server`. Importing this module does not
import Celery.
"""

from __future__ import annotations

from agentloop.actions.model import ModelRequest
from agentloop.orchestration.llm.offline import OfflineModel, example_from_schema
from agentloop.orchestration.testing.contract import (
    ContractReport,
    assert_event_contract,
    assert_json_value,
    assert_runnable_shape,
    check_action,
    check_loop,
    check_runnable,
)
from agentloop.orchestration.testing.doubles import (
    FunctionModel,
    ScriptedModel,
    error_reply,
    text_reply,
    tool_call,
)
from agentloop.orchestration.testing.progress_recorder import ProgressRecorder
from agentloop.orchestration.testing.replays import ReplayMismatch, assert_replays
from agentloop.orchestration.testing.servers.anthropic_server import AnthropicCompatibleServer
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    RecordedRequest,
    reply_delay,
    reply_disconnect,
    reply_error,
    reply_json,
    reply_text,
    reply_tool_call,
)

#: What pytest loads when a suite names this module as a plugin.
pytest_plugins = ["agentloop.orchestration.testing.plugin"]

__all__ = [
    "AnthropicCompatibleServer",
    "ContractReport",
    "FunctionModel",
    "ModelRequest",
    "OfflineModel",
    "OpenAICompatibleServer",
    "ProgressRecorder",
    "RecordedRequest",
    "ReplayMismatch",
    "ScriptedModel",
    "assert_event_contract",
    "assert_json_value",
    "assert_replays",
    "assert_runnable_shape",
    "check_action",
    "check_loop",
    "check_runnable",
    "error_reply",
    "example_from_schema",
    "reply_delay",
    "reply_disconnect",
    "reply_error",
    "reply_json",
    "reply_text",
    "reply_tool_call",
    "text_reply",
    "tool_call",
]

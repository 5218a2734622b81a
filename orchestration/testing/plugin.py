"""The pytest plugin of the contract testing kit (entry point ``agentloop``).

Fixtures: ``offline_model``, ``scripted_model``, ``function_model`` (a factory),
``progress_recorder`` and ``agentloop_contract`` (the ``check_*`` helpers).
Installed with the package, so a user's own test suite gets them too.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from orchestration.llm.offline import OfflineModel
from orchestration.testing import contract
from orchestration.testing.doubles import FunctionModel, ScriptedModel, TurnFunction
from orchestration.testing.recorder import ProgressRecorder


@pytest.fixture
def offline_model() -> OfflineModel:
    """A deterministic model that derives tool arguments from their schemas."""
    return OfflineModel()


@pytest.fixture
def scripted_model() -> ScriptedModel:
    """A model answering from a queue: ``scripted_model.push(tool_call(...), text_reply(...))``."""
    return ScriptedModel()


@pytest.fixture
def function_model() -> Callable[[TurnFunction], FunctionModel]:
    """A factory: ``function_model(lambda request: text_reply("hi"))``."""
    return FunctionModel


@pytest.fixture
def progress_recorder() -> ProgressRecorder:
    """An ``on_progress`` callback that keeps every event."""
    return ProgressRecorder()


@pytest.fixture
def agentloop_contract() -> Any:
    """``check_runnable``, ``check_loop``, ``check_action`` and the ``assert_*`` helpers."""
    return SimpleNamespace(
        check_runnable=contract.check_runnable,
        check_loop=contract.check_loop,
        check_action=contract.check_action,
        assert_runnable_shape=contract.assert_runnable_shape,
        assert_event_contract=contract.assert_event_contract,
        assert_json_value=contract.assert_json_value,
    )

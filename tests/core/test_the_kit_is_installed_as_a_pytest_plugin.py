"""The testing kit as a pytest plugin: opt-in (``pytest_plugins = ["agentloop.testing"]``), its
fixtures give the kit. This suite opts in in ``tests/conftest.py``."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import pytest

from agentloop.testing import (
    FunctionModel,
    OfflineModel,
    ProgressRecorder,
    ScriptedModel,
    assert_event_contract,
    assert_json_value,
    assert_runnable_shape,
    check_action,
    check_loop,
    check_runnable,
)


def test_the_kit_is_an_opt_in_pytest_plugin(pytestconfig: pytest.Config) -> None:
    plugins = {entry.name: entry.value for entry in entry_points(group="pytest11")}

    assert not any(value.startswith("agentloop") for value in plugins.values()), plugins
    assert pytestconfig.pluginmanager.has_plugin("agentloop.testing")
    assert pytestconfig.pluginmanager.has_plugin("agentloop.orchestration.testing.plugin")


def test_the_plugin_fixtures_give_the_kit(
    offline_model: Any,
    scripted_model: Any,
    function_model: Any,
    progress_recorder: Any,
    agentloop_contract: Any,
) -> None:
    assert isinstance(offline_model, OfflineModel)
    assert isinstance(scripted_model, ScriptedModel) and scripted_model.queue == type(scripted_model.queue)()
    assert function_model is FunctionModel
    assert isinstance(progress_recorder, ProgressRecorder) and progress_recorder.events == []
    assert (
        agentloop_contract.check_runnable,
        agentloop_contract.check_loop,
        agentloop_contract.check_action,
        agentloop_contract.assert_runnable_shape,
        agentloop_contract.assert_event_contract,
        agentloop_contract.assert_json_value,
    ) == (
        check_runnable,
        check_loop,
        check_action,
        assert_runnable_shape,
        assert_event_contract,
        assert_json_value,
    )

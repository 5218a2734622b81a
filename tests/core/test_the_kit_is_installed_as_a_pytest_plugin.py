"""The testing kit as a pytest plugin: installed by entry point, its fixtures give the kit."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import pytest

from orchestration.testing import (
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


def test_the_kit_is_installed_as_a_pytest_plugin(pytestconfig: pytest.Config) -> None:
    plugins = {entry.name: entry.value for entry in entry_points(group="pytest11")}

    assert plugins.get("agentloop") == "orchestration.testing.plugin"
    assert pytestconfig.pluginmanager.has_plugin("agentloop")


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

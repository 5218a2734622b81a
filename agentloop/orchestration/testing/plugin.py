"""The pytest plugin of the contract testing kit (entry point ``agentloop``).

Installed with the package (``pip install agentloop[testing]`` brings pytest
and pytest-asyncio along), so a user's own test suite gets it too.

Fixtures: ``offline_model``, ``scripted_model``, ``function_model`` (a factory),
``progress_recorder``, ``agentloop_contract`` (the ``check_*`` helpers),
``replay_recording`` (an exported recording as a regression test:
:func:`~agentloop.orchestration.testing.replays.assert_replays`) and
``agentloop_allow_model_requests``.

Real model requests are blocked while tests run: a processor that would send
one to a server off this machine (not ``127.0.0.1``/``localhost``) raises
:class:`~agentloop.orchestration.errors.ModelRequestsBlockedError`, and the
test fails with a message naming the switches that allow them, even when the
code under test swallowed the error. Allow them for the whole run with
``pytest --agentloop-allow-model-requests`` or ``AGENTLOOP_ALLOW_MODEL_REQUESTS=1``,
or for one test with the ``agentloop_allow_model_requests`` fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from agentloop.orchestration.errors import SettingsError
from agentloop.orchestration.llm.offline import OfflineModel
from agentloop.orchestration.llm.request_guard import GuardState, model_requests
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.testing import contract
from agentloop.orchestration.testing.doubles import FunctionModel, ScriptedModel, TurnFunction
from agentloop.orchestration.testing.progress_recorder import ProgressRecorder

ALLOW_OPTION = "--agentloop-allow-model-requests"
ALLOW_FIXTURE = "agentloop_allow_model_requests"
ALLOW_VARIABLE = "AGENTLOOP_ALLOW_MODEL_REQUESTS"
#: How to turn the block off; it ends every refusal.
HINT = (
    f"Use a model double (offline_model, scripted_model, function_model) or a local server; "
    f"to allow real requests, run pytest with {ALLOW_OPTION} or {ALLOW_VARIABLE}=1, "
    f"or use the {ALLOW_FIXTURE} fixture in that test."
)
_PREVIOUS = pytest.StashKey[GuardState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentloop", "agentloop testing kit")
    group.addoption(
        ALLOW_OPTION,
        action="store_true",
        default=False,
        help=f"let tests send requests to real model servers (blocked by default; also {ALLOW_VARIABLE}=1)",
    )


def _allowed_by_environment() -> bool:
    try:
        return load_settings().model.provider.allow_model_requests is True
    except SettingsError:  # a malformed setting is the tests' business: the block stays on
        return False


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_PREVIOUS] = model_requests.state
    if config.getoption(ALLOW_OPTION, default=False) or _allowed_by_environment():
        model_requests.allow()
    else:
        model_requests.block(hint=HINT)


def pytest_unconfigure(config: pytest.Config) -> None:
    previous = config.stash.get(_PREVIOUS, None)
    if previous is not None:  # an in-process pytest inside a test puts the outer run's switch back
        model_requests.restore(previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Fail a test that tried to reach a real model, even if its code swallowed the refusal."""
    model_requests.take_refusals()
    try:
        result = yield
    except BaseException:
        model_requests.take_refusals()
        raise
    refusals = model_requests.take_refusals()
    if refusals:
        pytest.fail(refusals[0], pytrace=False)
    return result


@pytest.fixture
def agentloop_allow_model_requests() -> Iterator[None]:
    """Real model requests allowed during this test (blocked by default under the plugin)."""
    with model_requests.allowing():
        yield


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


@pytest.fixture
def replay_recording() -> Callable[..., Any]:
    """``replay_recording("recording.json", runnable=Cls)``: replay an exported recording; the test
    fails with the first divergence and the output's difference
    (:func:`~agentloop.orchestration.testing.replays.assert_replays`)."""
    from agentloop.orchestration.testing.replays import assert_replays  # the store's modules, on use

    return assert_replays

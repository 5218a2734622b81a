"""The plugin's switch: real model requests are blocked in tests, with an error naming how to allow them;
requests to local test servers go through."""

from __future__ import annotations

import pytest

from agentloop.orchestration.errors import ModelRequestsBlockedError
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.llm.request_guard import ModelRequestGuard, is_local_url, model_requests
from agentloop.orchestration.testing.plugin import ALLOW_FIXTURE, ALLOW_OPTION, ALLOW_VARIABLE


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://127.8.9.10", True),
        ("http://localhost:11434/v1", True),
        ("http://LOCALHOST", True),
        ("http://[::1]:9/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://api.anthropic.com", False),
        ("http://127.0.0.1.attacker.example/v1", False),
        ("http://10.0.0.5/v1", False),
        ("not a url", False),
    ],
)
def test_only_this_machine_counts_as_local(url: str, local: bool) -> None:
    assert is_local_url(url) is local


def test_a_blocked_guard_refuses_remote_urls_names_the_way_out_and_remembers_the_refusal() -> None:
    guard = ModelRequestGuard()
    guard.block(hint="Run with --let-me.")

    guard.check(url="http://127.0.0.1:9/v1", sender="P")
    with pytest.raises(ModelRequestsBlockedError) as refused:
        guard.check(url="https://user:secret@api.example.com/v1", sender="P")

    message = str(refused.value)
    assert message.startswith("real model requests are blocked in tests: P would send a request to")
    assert message.endswith("Run with --let-me.") and "secret" not in message
    assert guard.take_refusals() == (message,) and guard.take_refusals() == ()


def test_allowing_lets_requests_through_and_restores_the_block_afterwards() -> None:
    guard = ModelRequestGuard()
    guard.block(hint="h")

    with guard.allowing():
        assert not guard.blocked
        guard.check(url="https://api.openai.com/v1", sender="P")
    assert guard.blocked
    guard.allow()
    assert not guard.blocked


def test_the_plugin_blocks_real_requests_in_this_test_run() -> None:
    assert model_requests.blocked


async def test_a_processor_refuses_to_reach_a_real_server_and_says_how_to_allow_it() -> None:
    processor = OpenAIProcessor(api_key="sk-not-a-real-key-at-all", max_retries=0, timeout=0.5)

    with pytest.raises(ModelRequestsBlockedError) as refused:
        await processor.send_request(
            instruction="hi",
            tools=[],
            tool_choices=None,
            history_messages=[],
            documents=[],
            files=[],
            is_auto_handle_function_call=False,
        )
    await processor.aclose()

    message = str(refused.value)
    assert "OpenAIProcessor would send a request to https://api.openai.com/v1" in message
    assert ALLOW_OPTION in message and f"{ALLOW_VARIABLE}=1" in message and ALLOW_FIXTURE in message
    assert model_requests.take_refusals() == (message,)  # seen here: the test need not fail for it


def test_the_fixture_allows_real_requests_for_one_test(agentloop_allow_model_requests: None) -> None:
    assert not model_requests.blocked
    model_requests.check(url="https://api.openai.com/v1", sender="OpenAIProcessor")


USER_SUITE = """
import pytest

from agentloop.actions import ForcedToolAction
from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.llm.request_guard import model_requests
from agentloop.orchestration.testing.servers.anthropic_server import AnthropicCompatibleServer


async def ask(processor):
    return await processor.send_request(
        instruction="hi", tools=[], tool_choices=None, history_messages=[], documents=[], files=[],
        is_auto_handle_function_call=False,
    )


@pytest.mark.asyncio
async def test_direct_call():
    await ask(AnthropicProcessor(api_key="sk-ant-test", max_retries=0))


@pytest.mark.asyncio
async def test_swallowed_call():
    try:
        await ask(OpenAIProcessor(api_key="sk-test-key-test-key", max_retries=0))
    except Exception:
        pass  # code under test that hides the error still fails the test


@pytest.mark.asyncio
async def test_local_server():
    with AnthropicCompatibleServer() as server:
        async with AnthropicProcessor(base_url=server.base_url) as processor:
            assert (await ask(processor)).text == "ok"


def test_switch():
    print("BLOCKED", model_requests.blocked)
"""


def test_a_users_suite_fails_on_real_requests_even_swallowed_and_passes_on_local_servers(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_user=USER_SUITE)
    pytester.makeconftest('pytest_plugins = ["agentloop.testing"]')  # a user's suite opts in
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")

    # -rN: no short summary, whose lines pytest cuts to the terminal's width unless CI is set; the
    # failures are read from their sections (a test's header, then its error in full)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-s", "-rN")

    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_direct_call _*",
            "E   *ModelRequestsBlockedError: real model requests are blocked in tests: "
            "AnthropicProcessor would send a request to https://api.anthropic.com*",
            "*_ test_swallowed_call _*",
            f"*OpenAIProcessor would send a request to https://api.openai.com/v1*{ALLOW_OPTION}*",
        ]
    )
    result.stdout.fnmatch_lines(["*BLOCKED True*"])
    assert model_requests.blocked  # the outer run's switch is back


@pytest.mark.parametrize("how", ["option", "variable"])
def test_the_option_or_the_variable_turns_the_block_off(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    pytester.makepyfile(test_user=USER_SUITE)
    pytester.makeconftest('pytest_plugins = ["agentloop.testing"]')  # a user's suite opts in
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    if how == "variable":
        monkeypatch.setenv(ALLOW_VARIABLE, "1")
    options = [ALLOW_OPTION] if how == "option" else []

    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-s", "-k", "switch or local", *options)

    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*BLOCKED False*"])
    assert model_requests.blocked

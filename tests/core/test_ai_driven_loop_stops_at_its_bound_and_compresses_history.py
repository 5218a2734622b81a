"""``AiDrivenAgentLoop``: at the bound it returns the best answer so far; long history is summarised."""

from __future__ import annotations

import asyncio
import json

from ai_driven_support import INSTRUCTION, NO_USAGE, USER, Researcher, assistant_calls, research, tool_ok
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.actions import AiResponse, FunctionCall, Usage
from agentloop.loops import AiDrivenAgentLoop
from agentloop.testing import (
    ProgressRecorder,
    ScriptedModel,
    check_loop,
    error_reply,
    text_reply,
    tool_call,
)

# ----- the bound ----------------------------------------------------------------------------------


async def test_at_the_bound_the_result_says_so_and_carries_the_best_answer_so_far(
    scripted_model: ScriptedModel, progress_recorder: ProgressRecorder
) -> None:
    class Short(Researcher):
        max_iterations = 3

    scripted_model.push(
        tool_call("search", {"query": "cats"}, id="c1"),
        tool_call("search", {"query": "dogs"}, id="c2"),
        tool_call("explode", {}, id="c3"),
    )

    result = await research(scripted_model, loop=Short, on_progress=progress_recorder)

    assert result == {
        "answer": ["record about dogs"],
        "finished": False,
        "stopped_by": "bound",
        "usage": NO_USAGE,
    }
    assert progress_recorder.transcript()[""][-1] == (
        "Short",
        "done",
        "completed",
        3,
        3,
        "hit the iteration bound",
        {"stopped_by": "bound"},
    )
    scripted_model.assert_consumed()


async def test_at_the_bound_with_nothing_useful_the_best_answer_is_none(
    scripted_model: ScriptedModel,
) -> None:
    class Short(Researcher):
        max_iterations = 2

    scripted_model.push(error_reply("down"), tool_call("teleport", {}))

    assert await research(scripted_model, loop=Short) == {
        "answer": None,
        "finished": False,
        "stopped_by": "bound",
        "usage": NO_USAGE,
    }


async def test_usage_is_summed_over_every_turn_including_failed_ones(scripted_model: ScriptedModel) -> None:
    scripted_model.push(
        tool_call("search", {"query": "a"}, usage=Usage(input_tokens=100, output_tokens=7)),
        AiResponse.failure("timeout", usage=Usage(input_tokens=50)),
        text_reply("done", usage=Usage(input_tokens=120, output_tokens=3)),
    )

    result = await research(scripted_model)

    assert result["usage"] == {"input_tokens": 270, "output_tokens": 10}


# ----- compression --------------------------------------------------------------------------------


class Forgetful(Researcher):
    token_budget = 60
    keep_recent_messages = 2


async def test_history_past_the_token_budget_is_summarised_and_reported_as_a_compress_phase(
    scripted_model: ScriptedModel, progress_recorder: ProgressRecorder
) -> None:
    scripted_model.push(
        tool_call("search", {"query": "q0"}, id="c0"),
        tool_call("search", {"query": "q1"}, id="c1"),
        tool_call("finish", {"answer": "done"}, id="f"),
    )

    result = await research(scripted_model, loop=Forgetful, on_progress=progress_recorder)

    assert result["answer"] == "done"
    assert [(phase, iteration) for _, phase, _, iteration, *_ in progress_recorder.transcript()[""]] == [
        ("start", 0),
        ("act", 1),
        ("act", 2),
        ("compress", 2),
        ("finish", 3),
        ("done", 3),
    ]
    third = scripted_model.requests[2]
    assert third.history_messages == (
        USER,
        assistant_calls(("c1", "search", '{"query": "q1"}')),
        tool_ok("c1", ["record about q1"]),
    )
    assert third.instruction == (
        INSTRUCTION + "\n<earlier_steps_summary><![CDATA["
        "assistant: called search\n"
        'tool: {"ok": true, "result": ["record about q0"]}'
        "]]></earlier_steps_summary>"
    )


def test_compression_keeps_the_first_request_and_never_separates_tool_results_from_their_call() -> None:
    loop = type("Roomy", (Forgetful,), {"token_budget": 1000}).create(context=None)
    state = loop.create_initial_state(input="Find cats")
    calls = [("a", "search", "{}"), ("b", "search", "{}"), ("c", "search", "{}")]
    history = [
        *state["history"],
        assistant_calls(("x", "search", "{}")),
        tool_ok("x", 1),
        assistant_calls(*calls),
        tool_ok("a", 1),
        tool_ok("b", 2),
        tool_ok("c", 3),
    ]

    compressed = loop.compress_state(state={**state, "history": history}, iteration=2)

    assert compressed["history"] == [USER]
    assert compressed["summary"].splitlines() == [
        "assistant: called search",
        'tool: {"ok": true, "result": 1}',
        "assistant: called search, search, search",
        'tool: {"ok": true, "result": 1}',
        'tool: {"ok": true, "result": 2}',
        'tool: {"ok": true, "result": 3}',
    ]


turn_widths = st.lists(st.integers(1, 3), min_size=1, max_size=8)


@settings(max_examples=40, deadline=None)
@given(widths=turn_widths, keep=st.integers(1, 6), budget=st.integers(10, 200))
def test_after_any_compression_every_tool_result_still_follows_its_call(
    widths: list[int], keep: int, budget: int
) -> None:
    model = ScriptedModel()
    for turn, width in enumerate(widths):
        calls = tuple(
            FunctionCall(name="search", arguments=json.dumps({"query": f"q{turn}.{i}"}), id=f"c{turn}.{i}")
            for i in range(width)
        )
        model.push(AiResponse(function_calls=calls))
    model.push(text_reply("done"))
    loop = type(
        "Squeezed",
        (Researcher,),
        {"token_budget": budget, "keep_recent_messages": keep, "max_iterations": 20},
    )

    report = asyncio.run(check_loop(loop, input="Find cats", context={"processor": model}))

    assert report.result["answer"] == "done"
    for request in model.requests:
        history = request.history_messages
        assert history[0] == USER
        assert len(history) == 1 or history[1]["role"] != "tool"
        asked: set[str] = set()
        for message in history[1:]:
            if message["role"] == "assistant":
                asked = {call["id"] for call in message.get("tool_calls", ())}
            else:
                assert message["tool_call_id"] in asked, f"orphan tool result in {history}"


def test_the_built_in_summary_drops_whole_old_lines_to_fit_its_budget() -> None:

    class Tiny(AiDrivenAgentLoop):
        token_budget = 20  # 40 characters of summary

    loop = Tiny.create(context=None)
    messages = [{"role": "user", "content": f"message number {i}"} for i in range(6)]
    summary = loop.summarize_history(messages=messages, previous_summary=None)
    assert summary == "user: message number 5"
    assert all(line.startswith("user: ") for line in summary.splitlines())

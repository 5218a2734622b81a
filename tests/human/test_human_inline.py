"""Human in the loop in-process: the step waits on the runner's ``on_question`` (a value or an
awaitable), answers are checked, and a run with no one to ask says so."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from workflows.human import Approve, FanWithApproval, Typed

from agentloop.actions.errors import InvalidAnswerError, NoOneToAskError
from agentloop.actions.human import CallbackChannel, Question, QuestionKind, check_answer
from agentloop.loops import InlineAgentRunner

APPROVED = {"input": "b", "steps": ["step0", "approved=True", "step2"]}


def test_the_callback_answers_and_the_step_goes_on() -> None:
    asked: list[Question] = []

    def on_question(question: Question) -> Any:
        asked.append(question)
        return True

    runner = InlineAgentRunner.create(runnable=Approve)
    assert runner.request_sync(input="b", on_question=on_question) == APPROVED
    assert [question.prompt for question in asked] == ["ship it?"]


def test_a_branch_waits_on_an_awaitable_while_the_others_finish() -> None:
    async def scenario() -> Any:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        asked = asyncio.Event()

        def on_question(question: Question) -> Any:
            asked.set()
            return answer

        runner = InlineAgentRunner.create(runnable=FanWithApproval)
        run = asyncio.create_task(runner.request(input=None, on_question=on_question))
        await asked.wait()
        assert not run.done()
        answer.set_result(True)
        return await run

    assert asyncio.run(scenario()) == {"a": "quick:a", "b": APPROVED, "c": "quick:c"}


def test_a_wrong_answer_fails_the_step() -> None:
    runner = InlineAgentRunner.create(runnable=Typed)
    with pytest.raises(InvalidAnswerError, match="count"):
        runner.request_sync(input=1, on_question=lambda question: {"count": "many"})


def test_without_a_channel_no_one_is_asked() -> None:
    with pytest.raises(NoOneToAskError, match="on_question"):
        InlineAgentRunner.create(runnable=Approve).request_sync(input=1)


def test_answer_schemas_by_kind() -> None:
    assert Question(prompt="ok?", kind=QuestionKind.APPROVAL).answer_schema() == {"type": "boolean"}
    choice = Question(prompt="which?", kind=QuestionKind.CHOICE, choices=("a", "b"))
    assert check_answer(choice, "a") == "a"
    with pytest.raises(InvalidAnswerError):
        check_answer(choice, "c")
    with pytest.raises(ValueError, match="choices"):
        Question(prompt="which?", kind=QuestionKind.CHOICE)
    assert check_answer(Question(prompt="name?"), "Ada") == "Ada"


def test_a_question_round_trips_and_its_key_is_its_content() -> None:
    question = Question(prompt="which?", kind="choice", choices=("a", "b"), expires_in=5, default="a")
    again = Question.from_dict(question.to_dict())
    assert again == question and again.has_default
    assert Question(prompt="x").key == Question(prompt="x").key != Question(prompt="y").key
    assert Question(prompt="x", key="mine").key == "mine"


def test_the_callback_channel_checks_the_answer() -> None:
    channel = CallbackChannel(lambda question: "yes")
    with pytest.raises(InvalidAnswerError):
        asyncio.run(channel.ask(Question(prompt="ok?", kind=QuestionKind.APPROVAL), path=""))

"""What a recorded run keeps, where, and how a replay reads it: in-process, on doubles, in seconds."""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentloop import (
    BaseActionStage,
    BaseAgentLoop,
    InlineAgentRunner,
    InMemoryRecording,
    InMemoryStepCache,
    InMemoryToolStore,
    ModelRequest,
    Question,
    QuestionKind,
    RecordedEntry,
    StandardContext,
    TypedToolAction,
    ask_human,
    sync_tools,
)
from agentloop.actions.recording import CACHE_HIT, HUMAN, MODEL, TOOL
from agentloop.orchestration.errors import NetworkBlockedError
from agentloop.orchestration.llm.limits.backends.memory import MemoryBackend
from agentloop.orchestration.llm.limits.processor import RateLimitedProcessor
from agentloop.orchestration.llm.limits.window import WindowRateLimiter
from agentloop.orchestration.redaction import scrub_values
from agentloop.orchestration.replay import (
    RunRecording,
    field_changes,
    no_network,
    replay,
)
from agentloop.testing import ReplayMismatch, ScriptedModel, assert_replays, text_reply, tool_call


class Label(BaseModel):
    label: str


class LabelTicket(TypedToolAction[Label]):
    name = "label_ticket"
    description = "Label a ticket."
    instruction = "Label the ticket."

    def build_instruction(self, *, arguments: Any, context: Any) -> str:
        return f"{self.instruction}\n{arguments['text']}"


class LabelStage(BaseActionStage):
    action = LabelTicket


class CachedLabel(LabelTicket):
    cache_ttl = 60


class CachedLabelStage(BaseActionStage):
    action = CachedLabel


class AskThenLabel(BaseAgentLoop):
    """Iteration 0 asks a person which text to label; iteration 1 labels it."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"text": None, "label": None}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        if iteration == 0:
            text = await ask_human(Question(prompt="which ticket?", kind=QuestionKind.TEXT))
            return {**state, "text": text}
        label = await LabelTicket().run(arguments={"text": state["text"]}, context=self.context)
        return {**state, "label": None if label is None else label.label}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["label"] is not None

    def build_result(self, *, state: Any) -> Any:
        return state


def labels(*names: str) -> ScriptedModel:
    model = ScriptedModel()
    model.push(*(tool_call("label_ticket", {"label": name}) for name in names))
    return model


async def recorded(
    runnable: type, model: Any, input: Any, *, tools: InMemoryToolStore | None = None, **options: Any
) -> RunRecording:
    recording = InMemoryRecording()
    context = StandardContext(processor=model, tool_store=tools or InMemoryToolStore())
    runner = InlineAgentRunner.create(runnable=runnable, context=context)
    output = await runner.request(input=input, recording=recording, **options)
    return RunRecording(
        run_id="r-1", runnable="labels", input=input, output=output, entries=tuple(recording.entries)
    )


def test_an_entry_and_a_request_go_to_json_and_back() -> None:
    request = ModelRequest(
        instruction="hi",
        tools=({"name": "t", "parameters": {"type": "object"}},),
        tool_choices=({"name": "t"},),
        history_messages=({"role": "user", "content": "x"},),
    )
    entry = RecordedEntry(path="a/b", iteration=2, kind=MODEL, seq=1, data={"request": request.to_dict()})

    again = RecordedEntry.from_dict(json.loads(json.dumps(entry.to_dict())))

    assert again == entry
    assert ModelRequest.from_dict(again.data["request"]) == request
    with pytest.raises(ValueError, match="unknown kind 'other'"):
        RecordedEntry.from_dict({**entry.to_dict(), "kind": "other"})


def test_field_changes_name_each_changed_field_by_its_path() -> None:
    recorded = {"instruction": "a", "history": [{"content": "x"}], "tools": [1]}
    replayed = {"instruction": "b", "history": [{"content": "y"}, {"content": "z"}], "tools": [1]}

    changes = [(c.field, c.recorded, c.replayed) for c in field_changes(recorded, replayed)]

    assert changes == [
        ("instruction", "a", "b"),
        ("history[0].content", "x", "y"),
        ("history[1]", None, {"content": "z"}),
    ]
    assert [change.field for change in field_changes({"n": 1}, {"n": 1.0})] == ["n"]  # a type change
    assert field_changes([1, {"a": None}], [1, {"a": None}]) == []


async def test_a_recorded_step_keeps_its_model_turn_and_replays_without_the_model() -> None:
    recording = await recorded(LabelStage, labels("bug"), {"text": "It crashes."})

    [entry] = recording.entries
    assert (entry.path, entry.iteration, entry.kind, entry.seq) == ("", 0, MODEL, 0)
    assert entry.data["request"]["tool_choices"] == [{"name": "label_ticket"}]
    assert entry.data["response"]["function_calls"][0]["arguments"] == '{"label": "bug"}'

    silent = ScriptedModel()  # answers nothing: a turn that reached it would fail the step
    report = await replay(recording, runnable=LabelStage, context=StandardContext(processor=silent))

    assert report.ok, report.describe()
    assert silent.requests == [] and report.output == {"label": "bug"}


async def test_a_changed_prompt_is_reported_at_its_step_with_the_field_that_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recording = await recorded(LabelStage, labels("bug"), {"text": "It crashes."})
    monkeypatch.setattr(LabelTicket, "instruction", "Label the ticket, politely.")

    report = await replay(recording, runnable=LabelStage, context=StandardContext(processor=ScriptedModel()))

    assert not report.ok and report.output_changes == ()  # the recorded reply: the same output
    first = report.first_divergence
    assert first is not None and (first.path, first.iteration, first.seq) == ("", 0, 0)
    assert [change.field for change in first.changes] == ["instruction"]
    assert "Label the ticket, politely." in report.describe()


def synced() -> InMemoryToolStore:
    """A tool store after ``agentloop tools sync``: the generated schema, with its marker."""
    tools = InMemoryToolStore()
    sync_tools(tools, [LabelTicket])
    return tools


@pytest.mark.parametrize("synced_side", ["recorded", "replayed"])
async def test_a_tools_sync_on_one_side_only_is_no_divergence(synced_side: str) -> None:
    # the model receives the same tool either way: the sync marker is never sent
    recorded_tools, replayed_tools = (synced(), InMemoryToolStore())[
        :: 1 if synced_side == "recorded" else -1
    ]
    recording = await recorded(LabelStage, labels("bug"), {"text": "It crashes."}, tools=recorded_tools)
    [entry] = recording.entries
    assert ("x-agentloop" in entry.data["request"]["tools"][0]) is (synced_side == "recorded")
    context = StandardContext(processor=ScriptedModel(), tool_store=replayed_tools)

    report = await replay(recording, runnable=LabelStage, context=context)

    assert report.ok, report.describe()


async def test_a_synced_row_edited_on_one_side_is_a_divergence_of_what_the_model_receives() -> None:
    recording = await recorded(LabelStage, labels("bug"), {"text": "It crashes."}, tools=synced())
    edited = synced()
    row = edited.get_payload("label_ticket")
    assert row is not None
    edited.put("label_ticket", {**row, "description": "Label a support ticket."})
    context = StandardContext(processor=ScriptedModel(), tool_store=edited)

    report = await replay(recording, runnable=LabelStage, context=context)

    first = report.first_divergence
    assert first is not None, report.describe()
    changes = [(c.field, c.recorded, c.replayed) for c in first.changes]
    assert changes == [("tools[0].description", "Label a ticket.", "Label a support ticket.")]


async def test_a_request_field_only_the_replay_has_is_a_divergence() -> None:
    recording = await recorded(LabelStage, labels("bug"), {"text": "It crashes."})
    [entry] = recording.entries
    request = dict(entry.data["request"])
    del request["files"]  # as a recording of an older request without the field
    request["tools"] = [{key: value for key, value in request["tools"][0].items() if key != "description"}]
    older = dataclasses.replace(
        recording, entries=(dataclasses.replace(entry, data={**entry.data, "request": request}),)
    )

    report = await replay(older, runnable=LabelStage, context=StandardContext(processor=ScriptedModel()))

    first = report.first_divergence
    assert first is not None, report.describe()
    assert [(c.field, c.recorded, c.replayed) for c in first.changes] == [
        ("tools[0].description", None, "Label a ticket."),
        ("files", None, []),
    ]


async def test_an_output_that_changed_is_reported_field_by_field() -> None:
    recording = await recorded(LabelStage, labels("bug"), {"text": "It crashes."})
    edited = dataclasses.replace(recording, output={"label": "feature"})

    report = await replay(edited, runnable=LabelStage, context=StandardContext(processor=ScriptedModel()))

    assert report.divergences == ()
    assert [(c.field, c.recorded, c.replayed) for c in report.output_changes] == [("label", "feature", "bug")]
    assert 'the output differs:\n  label: "feature" -> "bug"' in str(ReplayMismatch(report))


async def test_a_request_the_recording_lacks_and_a_turn_never_asked_are_both_divergences() -> None:
    recording = await recorded(LabelStage, labels("bug"), {"text": "It crashes."})
    moved = dataclasses.replace(
        recording,
        entries=tuple(dataclasses.replace(entry, path="elsewhere") for entry in recording.entries),
    )

    report = await replay(moved, runnable=LabelStage, context=StandardContext(processor=ScriptedModel()))

    reasons = [(d.path, d.reason) for d in report.divergences]
    assert reasons == [
        ("", "a model request the recording does not have"),
        ("elsewhere", "the recording has a model request the replay never sent"),
    ]


async def test_a_persons_answer_is_recorded_and_given_back_by_the_replay() -> None:
    asked: list[str] = []

    def answer(question: Question) -> str:
        asked.append(question.prompt)
        return "The app crashes."

    recording = await recorded(AskThenLabel, labels("bug"), None, on_question=answer)

    assert [(e.iteration, e.kind) for e in recording.entries] == [(0, HUMAN), (1, MODEL)]
    assert recording.entries[0].data["answer"] == "The app crashes."
    report = await replay(
        recording, runnable=AskThenLabel, context=StandardContext(processor=ScriptedModel())
    )
    assert report.ok, report.describe()
    assert asked == ["which ticket?"]  # once: the replay asked nobody


async def test_a_cache_hit_is_recorded_and_hit_again_by_the_replay() -> None:
    cache = InMemoryStepCache()
    model = labels("bug")
    await recorded(CachedLabelStage, model, {"text": "x"}, cache=cache)  # fills the cache
    recording = await recorded(CachedLabelStage, model, {"text": "x"}, cache=cache)

    [hit] = recording.entries
    assert hit.kind == CACHE_HIT and json.loads(hit.data["entry"])["value"] == {"label": "bug"}
    report = await replay(
        recording, runnable=CachedLabelStage, context=StandardContext(processor=ScriptedModel())
    )
    assert report.ok, report.describe()


async def test_a_wrapping_processor_records_its_turn_once() -> None:
    limiter = WindowRateLimiter(MemoryBackend(), key="k", requests_per_minute=100)
    recording = await recorded(LabelStage, RateLimitedProcessor(labels("bug"), limiter), {"text": "x"})

    assert [entry.kind for entry in recording.entries] == [MODEL]


async def test_an_ai_driven_loops_tool_results_are_recorded() -> None:
    from agentloop import AiDrivenAgentLoop

    class Plain(AiDrivenAgentLoop):
        pass

    model = ScriptedModel()
    model.push(tool_call("nope", {}), tool_call("finish", {"answer": "done"}))
    recording = await recorded(Plain, model, "go")

    tools = [entry for entry in recording.entries if entry.kind == TOOL]
    assert [(t.iteration, t.data["name"]) for t in tools] == [(0, "nope"), (1, "finish")]
    assert "unknown" in tools[0].data["result"].lower()


def test_a_recording_file_goes_out_and_back_and_a_bad_one_says_why(tmp_path: Path) -> None:
    recording = RunRecording(
        run_id="r-1",
        runnable="labels",
        input={"text": "x"},
        context={"documents": ["d"]},
        output={"label": "bug"},
        entries=(RecordedEntry(path="", iteration=0, kind=MODEL, seq=0, data={"request": {}}),),
    )
    path = tmp_path / "r.json"
    recording.save(path)

    assert RunRecording.load(path) == recording
    path.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not an agentloop recording"):
        RunRecording.load(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="is not JSON"):
        RunRecording.load(path)


def test_a_recording_never_keeps_a_key() -> None:
    data = {"request": {"instruction": "key sk-secret-1 here", "sk-secret-1": ["sk-secret-1"]}}

    assert scrub_values(data, ("sk-secret-1",)) == {
        "request": {"instruction": "key <hidden> here", "<hidden>": ["<hidden>"]}
    }


def test_no_network_refuses_a_connection_off_this_machine_only() -> None:
    connect = socket.socket.connect
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        with no_network():
            with socket.socket() as outside, pytest.raises(NetworkBlockedError, match="no network"):
                outside.connect(("192.0.2.1", 80))  # TEST-NET-1: never reached
            with socket.create_connection(listener.getsockname(), timeout=5):
                pass  # loopback stays open (a local database, a local server)
        assert socket.socket.connect is connect  # put back after the block
    finally:
        listener.close()


def test_a_replay_of_an_unanswered_question_fails_with_why() -> None:
    recording = RunRecording(run_id="r", runnable="x", entries=())

    with pytest.raises(ReplayMismatch, match="no answer to the question"):
        assert_replays(recording, runnable=AskThenLabel, context=StandardContext(processor=text_model()))


def text_model() -> ScriptedModel:
    model = ScriptedModel()
    model.push(text_reply("unused"))
    return model


def test_record_travels_in_the_launch_and_in_every_node_of_the_run() -> None:
    from agentloop.orchestration.errors import LaunchRequestError
    from agentloop.orchestration.wire import Ancestor, LaunchRequest, WorkflowNode

    assert LaunchRequest.parse(runnable="x", record=True).to_kwargs()["record"] is True
    assert "record" not in LaunchRequest.parse(runnable="x").to_kwargs()  # an older launch's digest holds
    with pytest.raises(LaunchRequestError, match="record must be true or false"):
        LaunchRequest.parse(runnable="x", record="yes")
    node = WorkflowNode(run_id="r", runnable="x", record=True)
    child = node.child(
        runnable="y",
        segment="branch/a",
        parent=Ancestor(kind="composite", runnable="x", path="", position="a"),
    )

    assert WorkflowNode.from_dict(json.loads(json.dumps(child.to_dict()))).record is True
    assert "record" not in WorkflowNode(run_id="r", runnable="x").to_dict()

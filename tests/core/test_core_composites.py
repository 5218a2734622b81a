"""``BaseCompositeAgent``: fan out into branches decided at run time, then merge."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.actions import BranchFailedError, RunCancelledError
from agentloop.loops import CancellationToken, InlineAgentRunner, ProceduralAgentLoop
from agentloop.pipelines import BaseCompositeAgent, Branch, BranchResult, FailurePolicy
from agentloop.testing import ProgressRecorder


class Gauge:
    """Counts branches in flight and remembers the peak; logs how each branch ended."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.log: list[str] = []


class Work(ProceduralAgentLoop):
    """A branch step: sleeps ``spec["sleep"]`` seconds, fails when ``spec["fail"]``."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"result": None, "spec": input}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        spec = state["spec"]
        gauge: Gauge | None = (self.context or {}).get("gauge")
        if gauge is not None:
            gauge.in_flight += 1
            gauge.peak = max(gauge.peak, gauge.in_flight)
        try:
            await asyncio.sleep(spec.get("sleep", 0))
            if spec.get("fail"):
                raise ValueError(f"branch {spec['n']} failed")
        except asyncio.CancelledError:
            if gauge is not None:
                gauge.log.append(f"{spec['n']} cancelled")
            raise
        finally:
            if gauge is not None:
                gauge.in_flight -= 1
        return {**state, "result": spec["n"] * 10}


class Fan(BaseCompositeAgent):
    """``input``: a list of branch inputs; branch keys are their positions."""

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Work, input={"n": n, **spec}, key=str(n)) for n, spec in enumerate(input)]


def run(
    composite: type[Any], input: Any, *, context: Any = None, recorder: ProgressRecorder | None = None
) -> Any:
    return InlineAgentRunner.create(runnable=composite, context=context).request_sync(
        input=input, on_progress=recorder
    )


# ----- width and merge ----------------------------------------------------------------------------


@pytest.mark.parametrize("width", [0, 1, 5])
def test_the_width_is_decided_from_the_input_at_run_time(width: int) -> None:
    recorder = ProgressRecorder()

    result = run(Fan, [{}] * width, recorder=recorder)

    assert result == [{"key": str(n), "ok": True, "output": n * 10, "error": None} for n in range(width)]
    assert recorder.transcript()[""] == [
        ("Fan", "start", "started", 0, width, f"0 of {width} branches", {"width": width}),
        ("Fan", "merge", "progress", width, width, f"{width} of {width} branches", {"width": width}),
        ("Fan", "done", "completed", width, width, f"{width} of {width} branches", {"width": width}),
    ]
    assert sorted(recorder.paths[1:]) == sorted(f"branch/{n}" for n in range(width))


def test_merge_results_receives_every_branch_result_in_branch_order_and_the_input() -> None:
    class Summed(Fan):
        def merge_results(self, *, results: Any, input: Any) -> Any:
            return {
                "keys": [r.key for r in results],
                "total": sum(r.output for r in results),
                "width": len(input),
            }

    # later branches finish first; the merge still sees branch order
    inputs = [{"sleep": 0.03}, {"sleep": 0.02}, {"sleep": 0.01}, {}]

    assert run(Summed, inputs) == {"keys": ["0", "1", "2", "3"], "total": 60, "width": 4}


def test_build_branches_and_merge_results_may_be_async() -> None:
    class AsyncFan(Fan):
        async def build_branches(self, *, input: Any) -> list[Branch]:
            await asyncio.sleep(0)
            return super().build_branches(input=input)

        async def merge_results(self, *, results: Any, input: Any) -> Any:
            return [r.output for r in results]

    assert run(AsyncFan, [{}, {}]) == [0, 10]


class Rendezvous(ProceduralAgentLoop):
    """A branch that waits until every branch has arrived: only branches that run at once finish.

    One after another, the first would wait for the others forever; the barrier's ceiling only
    ends such a hung test (``asyncio.TimeoutError``), it decides nothing when they meet.
    """

    def create_initial_state(self, *, input: Any) -> Any:
        return {"result": None, "n": input}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        barrier: asyncio.Barrier = self.context["barrier"]
        self.context["log"].append(f"in {state['n']}")
        await asyncio.wait_for(barrier.wait(), timeout=60)
        self.context["log"].append(f"out {state['n']}")
        return {**state, "result": state["n"]}


def test_branches_run_concurrently() -> None:
    class Meet(BaseCompositeAgent):
        def build_branches(self, *, input: Any) -> list[Branch]:
            return [Branch(runnable=Rendezvous, input=n, key=str(n)) for n in range(input)]

        def merge_results(self, *, results: Any, input: Any) -> Any:
            return [r.output for r in results]

    log: list[str] = []

    assert run(Meet, 5, context={"barrier": asyncio.Barrier(5), "log": log}) == [0, 1, 2, 3, 4]
    # every branch entered before any left: all five were in flight at once
    assert sorted(log[:5]) == [f"in {n}" for n in range(5)]
    assert sorted(log[5:]) == [f"out {n}" for n in range(5)]


@pytest.mark.parametrize(("bound", "width", "peak"), [(3, 10, 3), (1, 4, 1), (None, 6, 6), (8, 5, 5)])
def test_no_more_branches_than_the_concurrency_bound_run_at_once(
    bound: int | None, width: int, peak: int
) -> None:
    class Bounded(Fan):
        max_concurrency = bound

    gauge = Gauge()

    result = run(Bounded, [{"sleep": 0.01}] * width, context={"gauge": gauge})

    assert gauge.peak == peak
    assert [r["output"] for r in result] == [n * 10 for n in range(width)]


def test_branch_keys_must_be_unique() -> None:
    class Twins(BaseCompositeAgent):
        def build_branches(self, *, input: Any) -> list[Branch]:
            return [
                Branch(runnable=Work, input={"n": 1}, key="same"),
                Branch(runnable=Work, input={"n": 2}, key="same"),
            ]

    with pytest.raises(ValueError, match="duplicate branch key 'same'"):
        run(Twins, None)


@pytest.mark.parametrize("key", ["north/east", "a\\b", "/", ""])
def test_a_branch_key_holding_a_path_separator_is_refused_when_branches_are_built(key: str) -> None:
    class Slashed(BaseCompositeAgent):
        def build_branches(self, *, input: Any) -> list[Branch]:
            return [
                Branch(runnable=Work, input={"n": 1}, key="fine"),
                Branch(runnable=Work, input={"n": 2}, key=key),
            ]

    recorder = ProgressRecorder()
    with pytest.raises(ValueError, match="branch key") as refused:
        InlineAgentRunner.create(runnable=Slashed, context=None).request_sync(
            input=None, on_progress=recorder
        )

    assert repr(key) in str(refused.value)
    assert not [event for event in recorder.events if "/branch/" in f"/{event.path}"]  # no branch started


def test_build_branches_must_return_branches() -> None:
    class Sloppy(BaseCompositeAgent):
        def build_branches(self, *, input: Any) -> list[Any]:
            return [(Work, {"n": 1}, "a")]

    with pytest.raises(TypeError, match="build_branches must return Branch values"):
        run(Sloppy, None)


def test_a_composite_must_say_how_to_build_its_branches() -> None:
    with pytest.raises(NotImplementedError, match="BaseCompositeAgent must implement build_branches"):
        run(BaseCompositeAgent, None)


def test_a_branch_is_a_frozen_keyword_only_value() -> None:
    branch = Branch(runnable=Work, input={"n": 1}, key="a")

    with pytest.raises(dataclasses.FrozenInstanceError):
        branch.key = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Branch(Work, {"n": 1}, "a")  # type: ignore[misc]


# ----- failure policies ---------------------------------------------------------------------------


def test_fail_fast_raises_branch_failed_and_cancels_the_other_branches() -> None:
    gauge = Gauge()
    recorder = ProgressRecorder()

    # the siblings would sleep 30 s: only a cancellation logs "cancelled" for them
    with pytest.raises(BranchFailedError) as caught:
        run(Fan, [{"sleep": 30}, {"fail": True}, {"sleep": 30}], context={"gauge": gauge}, recorder=recorder)

    assert (caught.value.key, str(caught.value)) == ("1", "branch '1' failed: ValueError: branch 1 failed")
    assert isinstance(caught.value.error, ValueError)
    assert sorted(gauge.log) == ["0 cancelled", "2 cancelled"]
    assert recorder.transcript()[""][-1] == (
        "Fan",
        "error",
        "failed",
        0,
        3,
        "BranchFailedError: branch '1' failed: ValueError: branch 1 failed",
        {"width": 3},
    )
    assert recorder.transcript()["branch/1"][-1][1:3] == ("error", "failed")
    assert FailurePolicy(Fan.failure_policy) is FailurePolicy.FAIL_FAST


def test_branches_cancelled_by_fail_fast_end_their_own_progress_with_failed() -> None:
    recorder = ProgressRecorder()

    with pytest.raises(BranchFailedError):
        run(Fan, [{"sleep": 30}, {"fail": True, "sleep": 0.01}], recorder=recorder)

    assert recorder.transcript()["branch/0"] == [
        ("Work", "start", "started", 0, 4, "", {}),
        ("Work", "cancelled", "failed", 0, 4, "the run was cancelled", {}),
    ]


class Collecting(Fan):
    failure_policy = FailurePolicy.COLLECT


def test_collect_keeps_every_other_result_and_marks_the_failure() -> None:
    recorder = ProgressRecorder()

    result = run(
        Collecting, [{"sleep": 0.02}, {"fail": True}, {}, {"fail": True, "sleep": 0.01}], recorder=recorder
    )

    assert result == [
        {"key": "0", "ok": True, "output": 0, "error": None},
        {
            "key": "1",
            "ok": False,
            "output": None,
            "error": {"type": "ValueError", "message": "branch 1 failed"},
        },
        {"key": "2", "ok": True, "output": 20, "error": None},
        {
            "key": "3",
            "ok": False,
            "output": None,
            "error": {"type": "ValueError", "message": "branch 3 failed"},
        },
    ]
    assert recorder.statuses("") == ["started", "progress", "completed"]
    assert recorder.statuses("branch/1") == ["started", "failed"]


def test_under_collect_cancellation_still_stops_the_whole_run() -> None:
    token = CancellationToken()

    class CancelsTheRun(ProceduralAgentLoop):
        def advance_state(self, *, state: Any, iteration: int) -> Any:
            token.cancel()
            return {"result": None}

    class Mixed(BaseCompositeAgent):
        failure_policy = FailurePolicy.COLLECT

        def build_branches(self, *, input: Any) -> list[Branch]:
            return [
                Branch(runnable=CancelsTheRun, input=None, key="c"),
                Branch(runnable=Work, input={"n": 1, "sleep": 30}, key="w"),
            ]

    with pytest.raises(RunCancelledError):
        InlineAgentRunner.create(runnable=Mixed).request_sync(input=None, cancel=token)


# ----- BranchResult -------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
branch_results = st.one_of(
    st.builds(BranchResult, key=st.text(max_size=10), ok=st.just(True), output=json_values),
    st.builds(
        BranchResult,
        key=st.text(max_size=10),
        ok=st.just(False),
        error=st.fixed_dictionaries({"type": st.text(max_size=10), "message": st.text(max_size=20)}),
    ),
)


@settings(max_examples=40, deadline=None)
@given(result=branch_results)
def test_a_branch_result_round_trips_through_json(result: BranchResult) -> None:
    assert BranchResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_a_failed_branch_result_names_the_error_type_and_message() -> None:
    assert BranchResult.failure("k", KeyError("id")).to_dict() == {
        "key": "k",
        "ok": False,
        "output": None,
        "error": {"type": "KeyError", "message": "'id'"},
    }


async def test_a_concurrency_bound_below_one_is_a_clear_error() -> None:
    from agentloop.pipelines import BaseCompositeAgent

    class NoRoom(BaseCompositeAgent):
        max_concurrency = 0

        def build_branches(self, *, input: object) -> list[object]:
            return []

    import pytest as _pytest

    with _pytest.raises(ValueError, match="max_concurrency must be at least 1"):
        await NoRoom.create(context=None).run(input=None)


@pytest.mark.parametrize("size", [0, -1, 2.5, True, "50"])
async def test_a_pack_size_that_is_not_a_whole_number_of_at_least_one_is_a_clear_error(size: object) -> None:
    from agentloop.pipelines import BaseCompositeAgent

    class BadPack(BaseCompositeAgent):
        pack_size = size  # type: ignore[assignment]

        def build_branches(self, *, input: object) -> list[object]:
            return []

    with pytest.raises(ValueError, match="pack_size must be a whole number of at least 1"):
        await BadPack.create(context=None).run(input=None)

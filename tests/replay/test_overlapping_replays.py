"""Replays that overlap in two threads (issue 33, item 9): each is off the network for as long as
it runs, whichever ends first, and once both have ended (one of them raising, say) the process is
exactly as before: ``socket.connect`` / ``connect_ex`` the originals, the model guard unblocked.
The threads meet at barriers and events; nothing sleeps."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentloop import BaseAgentLoop
from agentloop.orchestration.errors import NetworkBlockedError
from agentloop.orchestration.llm.request_guard import model_requests
from agentloop.orchestration.replay import RunRecording, replay

WAIT = 30.0  # seconds: only a hung test ever waits this long


class Stop(BaseException):
    """Raised inside a replay and not caught by it (a replay turns an ``Exception`` into a finding)."""


def off_the_network() -> bool:
    """Whether a connection off this machine is refused now (and the model guard blocks)."""
    with socket.socket() as probe:
        probe.settimeout(WAIT)
        try:
            probe.connect(("192.0.2.1", 80))  # TEST-NET-1: never reached
        except NetworkBlockedError:
            return model_requests.blocked
        except OSError:
            return False
    return False


class Inside(BaseAgentLoop):
    """One iteration that calls ``context["inside"]()`` while its replay holds the network block."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"done": False}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        self.context["inside"]()
        return {"done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return "done"


class Pair:
    """Two replays in two threads: both inside at once, then ``first`` ends before the other."""

    def __init__(self, first: str, *, raises: str | None = None) -> None:
        self.first, self.raises = first, raises
        self.a_inside = threading.Event()  # "a" starts its replay first, "b" once "a" is inside
        self.both_inside = threading.Barrier(2, timeout=WAIT)
        self.ended = {"a": threading.Event(), "b": threading.Event()}
        self.seen: dict[str, list[bool]] = {"a": [], "b": []}
        self.errors: dict[str, BaseException] = {}

    def inside(self, name: str) -> Callable[[], None]:
        def inside() -> None:
            self.seen[name].append(off_the_network())
            if name == "a":
                self.a_inside.set()
            self.both_inside.wait()
            if name != self.first:  # the other one ends first; this one is still replaying
                assert self.ended[self.first].wait(WAIT)
                self.seen[name].append(off_the_network())
            if name == self.raises:
                raise Stop(name)  # the replay's block is left by an exception

        return inside

    def replay(self, name: str) -> None:
        recording = RunRecording(run_id=f"run-{name}", runnable="inside", entries=())
        try:
            if name == "b":
                assert self.a_inside.wait(WAIT)
            report = asyncio.run(replay(recording, runnable=Inside, context={"inside": self.inside(name)}))
            assert report.error is None, report.error
        except BaseException as error:
            self.errors[name] = error
        finally:
            self.ended[name].set()

    def run(self) -> None:
        threads = [threading.Thread(target=self.replay, args=(name,)) for name in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
            assert not thread.is_alive()


@pytest.mark.parametrize(
    ("first", "raises"),
    [
        pytest.param("a", None, id="the first to start ends first"),
        pytest.param("b", None, id="the last to start ends first"),
        pytest.param("a", "a", id="the first to start ends first, raising"),
        pytest.param("b", "b", id="the last to start ends first, raising"),
        pytest.param("a", "b", id="the first to start ends first, the other raising"),
    ],
)
def test_overlapping_replays_each_stay_off_the_network_and_leave_the_process_as_it_was(
    first: str, raises: str | None
) -> None:
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex
    with model_requests.allowing():  # the test plugin's own block off: only the replays block
        pair = Pair(first, raises=raises)
        pair.run()

        other = "b" if first == "a" else "a"
        assert pair.seen[first] == [True]
        assert pair.seen[other] == [True, True]  # still off the network after the other ended
        expected = {raises} if raises else set()
        assert set(pair.errors) == expected
        assert all(isinstance(error, Stop) for error in pair.errors.values())
        assert socket.socket.connect is connect and socket.socket.connect_ex is connect_ex
        assert not model_requests.blocked

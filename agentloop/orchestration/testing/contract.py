"""Assertions that any user-written action, loop, pipeline or composite keeps the contract.

Each ``check_*`` runs the unit for real (on the inline runner) and fails with
an ``AssertionError`` that says which rule broke:

- factory and run shape (``create(*, context)``, ``async run(*, input, on_progress)``);
- an action's ``parameters`` is a valid JSON Schema for an object;
- JSON-serialisable results and progress events (each event round-trips);
- per path, events go ``started`` -> ``progress``* -> ``completed`` | ``failed``: one terminal
  event per path (a degraded run's root ends with its ``degraded`` event, its own ``done``
  before it a ``progress`` one);
- iterations never exceed the bound; loop state is never mutated in place.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
from dataclasses import dataclass, field
from typing import Any

from jsonschema.exceptions import SchemaError

from agentloop.actions.arguments import ArgumentValidator
from agentloop.actions.awaiting import maybe_await
from agentloop.actions.base import BaseAgentAction
from agentloop.loops.base import BaseAgentLoop
from agentloop.loops.contract import Runnable
from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.loops.runner import InlineAgentRunner
from agentloop.orchestration.testing.progress_recorder import ProgressRecorder

_STATE_HOOKS = (
    "advance_state",
    "is_complete",
    "should_compress",
    "compress_state",
    "build_progress_event",
    "build_result",
    "build_bounded_result",
)


@dataclass(kw_only=True)
class ContractReport:
    """What a check observed, for further assertions."""

    result: Any
    events: list[ProgressEvent]
    advance_calls: int = 0
    states: list[Any] = field(default_factory=list)


def assert_json_value(value: Any, *, what: str) -> None:
    """``value`` survives a JSON round trip unchanged."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise AssertionError(f"{what} is not JSON-serialisable: {error}") from None
    assert json.loads(text) == value, f"{what} changes in a JSON round trip (tuples? non-str keys?)"


def assert_tool_schema(schema: Any, *, what: str) -> None:
    """``schema`` is a valid JSON Schema (draft 2020-12), so the loop can check arguments against it."""
    try:
        ArgumentValidator.check_schema(schema)
    except SchemaError as error:
        where = "".join(f"[{part!r}]" for part in error.absolute_path)
        raise AssertionError(f"{what} is not a valid JSON Schema: {error.message} at schema{where}") from None


def assert_runnable_shape(cls: type) -> None:
    """``create(*, context)`` is a classmethod factory; ``run(*, input, on_progress)`` is async."""
    create = inspect.getattr_static(cls, "create", None)
    assert isinstance(create, classmethod), f"{cls.__name__}.create must be a classmethod"
    params = inspect.signature(getattr(cls, "create")).parameters  # noqa: B009
    assert "context" in params and params["context"].kind is inspect.Parameter.KEYWORD_ONLY, (
        f"{cls.__name__}.create must take keyword-only context"
    )
    run = getattr(cls, "run", None)
    assert run is not None and inspect.iscoroutinefunction(run), f"{cls.__name__}.run must be async"
    run_params = inspect.signature(run).parameters
    for name in ("input", "on_progress"):
        assert name in run_params and run_params[name].kind is inspect.Parameter.KEYWORD_ONLY, (
            f"{cls.__name__}.run must take keyword-only {name}"
        )


def assert_event_contract(events: list[ProgressEvent]) -> None:
    """Every event round-trips through JSON; each path's events are well ordered and bounded."""
    assert events, "the run emitted no progress events"
    by_path: dict[str, list[ProgressEvent]] = {}
    for event in events:
        assert_json_value(event.to_dict(), what=f"event at {event.path!r}")
        assert ProgressEvent.from_json(event.to_json()) == event, (
            f"event at {event.path!r} does not round-trip"
        )
        assert 0 <= event.iteration <= event.max_iterations, (
            f"{event.runnable} at {event.path!r}: iteration {event.iteration} "
            f"exceeds bound {event.max_iterations}"
        )
        by_path.setdefault(event.path, []).append(event)
    for path, sequence in by_path.items():
        statuses = [event.status for event in sequence]
        assert statuses[0] is ProgressStatus.STARTED, f"{path!r} does not start with 'started': {statuses}"
        assert statuses[-1] in (ProgressStatus.COMPLETED, ProgressStatus.FAILED), (
            f"{path!r} does not end with 'completed' or 'failed': {statuses}"
        )
        assert all(s is ProgressStatus.PROGRESS for s in statuses[1:-1]), (
            f"{path!r} is out of order: {statuses}"
        )


async def check_runnable(cls: type[Runnable], *, input: Any, context: Any = None) -> ContractReport:
    """Run ``cls`` on the inline runner and check the whole contract."""
    assert_runnable_shape(cls)
    recorder = ProgressRecorder()
    result = await InlineAgentRunner.create(runnable=cls, context=context).request(
        input=input, on_progress=recorder
    )
    assert_json_value(result, what=f"{cls.__name__}'s result")
    assert_event_contract(recorder.events)
    assert recorder.paths and recorder.paths[0] == "", "the root runnable must report at the root path"
    return ContractReport(result=result, events=list(recorder.events))


async def check_loop(
    cls: type[BaseAgentLoop], *, input: Any, context: Any = None, json_state: bool = True
) -> ContractReport:
    """:func:`check_runnable`, plus: no hook mutates state in place, the bound holds,
    and (with ``json_state``) every state is JSON data, as Celery checkpoints need."""
    report = ContractReport(result=None, events=[])

    def guard(name: str, original: Any) -> Any:
        @functools.wraps(original)
        async def guarded(self: BaseAgentLoop, *, state: Any, **kwargs: Any) -> Any:
            before = copy.deepcopy(state)
            value = await maybe_await(original(self, state=state, **kwargs))
            assert state == before, f"{cls.__name__}.{name} mutated the state in place"
            if name == "advance_state":
                report.advance_calls += 1
                report.states.append(copy.deepcopy(value))
                if json_state:
                    assert_json_value(value, what=f"state after iteration {report.advance_calls}")
            return value

        return guarded

    namespace: dict[str, Any] = {name: guard(name, getattr(cls, name)) for name in _STATE_HOOKS}
    namespace["runnable_name"] = cls.runnable_name or cls.__name__
    guarded_cls = type(cls.__name__, (cls,), namespace)
    checked = await check_runnable(guarded_cls, input=input, context=context)
    bound = cls.create(context=context).max_iterations
    assert report.advance_calls <= bound, (
        f"{cls.__name__} ran {report.advance_calls} iterations, bound {bound}"
    )
    report.result, report.events = checked.result, checked.events
    return report


async def check_action(action: BaseAgentAction, *, arguments: dict[str, Any], context: Any = None) -> Any:
    """The action has a name and a tool schema, and ``run`` returns JSON data or ``None``."""
    assert isinstance(action, BaseAgentAction), f"{action!r} is not a BaseAgentAction"
    assert action.name and isinstance(action.name, str), f"{type(action).__name__} has no name"
    assert isinstance(action.description, str), f"{action.name}: description must be a str"
    assert_tool_schema(action.parameters, what=f"{action.name}'s parameters")
    assert action.parameters.get("type") == "object", f"{action.name}: parameters must be an object schema"
    assert_json_value(action.as_tool(), what=f"{action.name}'s tool payload")
    assert inspect.iscoroutinefunction(action.run), f"{action.name}.run must be async"
    value = await action.run(arguments=arguments, context=context)
    assert_json_value(value, what=f"{action.name}'s value")
    return value

"""Keep what agentloop tasks carry out of Flower and the worker logs.

The arguments of ``agentloop.*`` tasks hold prompts, user text and maybe
secrets (a run's input, its context spec, a stage's previous output); their
results hold model output. Celery shows both by default: in the events Flower
keeps, in ``celery inspect active`` and in the worker's log lines (``Task ...
succeeded in 0.1s: <result>``, a failure's message and traceback).
:func:`install_privacy` (called by ``orchestration.celery_adapter.tasks.install_tasks``)
hides them while task names, ids, states and identifiers stay readable::

    kwargs: {'runnable': 'record_search.demo', 'input': <hidden dict 123 chars>, 'context': None}
    args:   (previous=<hidden list 88 chars>, node=<node runnable='record_search.demo' path=''
             run_id='r-1'>, index=1, input=<hidden dict 123 chars>)
    result: <hidden result, 57 chars>

* **Producer** — :class:`RedactingAMQP`, the app's AMQP class, writes redacted
  ``argsrepr``/``kwargsrepr`` into every ``agentloop.*`` message the app sends
  (``send_task``, canvas, ``Task.replace``, chord callbacks, Flower's
  ``send-task`` when Flower runs ``-A orchestration``): message headers and
  ``task-sent`` events carry nothing else.
* **Worker** — :class:`RedactingRequest` recomputes both reprs from the decoded
  arguments (so messages from services without this package are covered):
  they are what the ``received`` line, ``task-received``, the pool child's log
  lines and ``inspect active|reserved|scheduled`` show. Its events carry
  ``<hidden result ...>`` and exceptions scrubbed of the hidden arguments' text.
* **Logs** — :class:`RedactingLogFilter` on Celery's worker loggers hides the
  success line's return value, scrubs failure and retry lines (message and
  traceback, each line cut at :data:`MAX_EXCEPTION_CHARS`) and cuts the pool's
  ``DEBUG`` line that dumps a whole message.

Shown are the parameters in :data:`SHOWN_PARAMETERS` whose value is a short
scalar and a ``node``'s runnable, path and run id; everything else is a size
hint. Other tasks keep Celery's behaviour. The result backend (results,
progress meta, exceptions as raised; ``result_extended`` is off) is
not redacted: ``docs/deployment.md`` says what that means for Flower.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from celery.worker.request import Request

__all__ = [
    "PRIVATE_PREFIX",
    "RedactingAMQP",
    "RedactingRequest",
    "SHOWN_PARAMETERS",
    "VISIBLE_RESULTS",
    "describe_hidden",
    "hidden_texts",
    "hide_result",
    "install_privacy",
    "is_private",
    "redact_call",
    "scrub",
]

#: Tasks whose name starts with this are private.
PRIVATE_PREFIX = "agentloop."

#: Parameters shown as they are when their value is a short scalar (identifiers and knobs, never content).
SHOWN_PARAMETERS = frozenset(
    {
        # agentloop.launch / progress / cancel / finalize / stage / merge
        "runnable",
        "run_id",
        "index",
        "after_id",
        "limit",
        "single",
        # agentloop.batch / batch_chunk / batch_summary
        "batch_id",
        "key",
        "provider",
        "offset",
        "chunk_size",
        "token_budget",
        "poll_seconds",
        "max_seconds",
        "started_at",
    }
)

#: Private tasks whose results carry no content and stay visible.
VISIBLE_RESULTS = frozenset({"agentloop.cancel", "agentloop.ping"})

#: Longest string shown for a shown parameter; longer ones are hidden.
MAX_SHOWN_CHARS = 200
#: Longest exception message (and traceback line) kept in logs and events.
MAX_EXCEPTION_CHARS = 500
#: Shortest string of a hidden argument that is scrubbed from exception texts.
MIN_SCRUB_CHARS = 6

_HIDDEN = "<hidden>"
_MAX_SCRUB_TEXTS = 1000
_MAX_DEPTH = 32
_NODE_FIELDS = ("runnable", "path", "run_id")
_TRACE_LOGGERS = ("celery.app.trace", "celery.worker.request", "celery.worker.strategy", "celery.pool")
_POOL_APPLY = "TaskPool: Apply"


def is_private(name: object) -> bool:
    """Whether the task called ``name`` is an agentloop task whose arguments and result are hidden."""
    return isinstance(name, str) and name.startswith(PRIVATE_PREFIX)


# -- describing values -----------------------------------------------------------------------------


def _json_size(value: Any) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False, default=repr))
    except (TypeError, ValueError, RecursionError):
        return len(repr(value))


def describe_hidden(value: Any) -> str:
    """A size hint standing for ``value``: ``<hidden dict 123 chars>``, ``<hidden int>``; ``None`` as is."""
    if value is None:
        return "None"
    kind = type(value).__name__
    if isinstance(value, bool | int | float):
        return f"<hidden {kind}>"
    size = len(value) if isinstance(value, str) else _json_size(value)
    return f"<hidden {kind} {size} chars>"


def _is_short_scalar(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float):
        return True
    return isinstance(value, str) and len(value) <= MAX_SHOWN_CHARS and value.isprintable()


def _describe_node(value: Any) -> str:
    if not isinstance(value, Mapping):
        return describe_hidden(value)
    fields = " ".join(
        f"{name}={value[name]!r}"
        for name in _NODE_FIELDS
        if isinstance(value.get(name), str) and _is_short_scalar(value[name])
    )
    return f"<node {fields}>" if fields else "<node>"


def _is_shown(name: str | None, value: Any) -> bool:
    return name in SHOWN_PARAMETERS and _is_short_scalar(value)


def _describe(name: str | None, value: Any) -> str:
    if name == "node":
        return _describe_node(value)
    return repr(value) if _is_shown(name, value) else describe_hidden(value)


def _hidden_part(name: str | None, value: Any) -> Any:
    """What of an argument is hidden: a node's context spec, a shown scalar nothing, anything else all."""
    if name == "node":
        return value.get("context") if isinstance(value, Mapping) else value
    return None if _is_shown(name, value) else value


_PARAMETERS: dict[Any, tuple[str, ...] | None] = {}


def _parameter_names(task: Any) -> tuple[str, ...] | None:
    """The names of ``task``'s parameters in call order (without ``self``), or ``None`` when unknown."""
    run = getattr(task, "run", None)
    if run is None:
        return None
    function = getattr(run, "__func__", run)
    if function in _PARAMETERS:
        return _PARAMETERS[function]
    try:
        parameters = inspect.signature(run).parameters.values()
    except (TypeError, ValueError):
        names = None
    else:
        names = tuple(
            parameter.name
            for parameter in parameters
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
        )
    if len(_PARAMETERS) < 1000:
        _PARAMETERS[function] = names
    return names


def redact_call(
    args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
    parameters: Sequence[str] | None = None,
) -> tuple[str, str]:
    """``(argsrepr, kwargsrepr)`` for a private task called with ``args`` and ``kwargs``.

    ``parameters`` are the task's parameter names in order; a positional
    argument whose name is unknown is always hidden.
    """
    names = tuple(parameters or ())
    parts = []
    for position, value in enumerate(args or ()):
        name = names[position] if position < len(names) else None
        shown = _describe(name, value)
        parts.append(f"{name}={shown}" if name else shown)
    argsrepr = "(" + ", ".join(parts) + ")"
    items = [f"{key!r}: {_describe(str(key), value)}" for key, value in (kwargs or {}).items()]
    kwargsrepr = "{" + ", ".join(items) + "}"
    return argsrepr, kwargsrepr


def hide_result(result_repr: Any, name: object = None) -> Any:
    """What a private task's result repr is shown as: ``<hidden result, 57 chars>`` (``None`` stays)."""
    if name in VISIBLE_RESULTS or result_repr is None or result_repr == "None":
        return result_repr
    return f"<hidden result, {len(str(result_repr))} chars>"


# -- scrubbing exception texts ---------------------------------------------------------------------


def _leaves(value: Any, depth: int = 0) -> Iterator[str]:
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item, depth + 1)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _leaves(item, depth + 1)


def _escapings(text: str) -> set[str]:
    """``text`` as it reads quoted once: as is, backslash-escaped (either quote), JSON-escaped."""
    escaped = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return {
        text,
        escaped,
        escaped.replace("'", "\\'"),
        escaped.replace('"', '\\"'),
        json.dumps(text)[1:-1],
        json.dumps(text, ensure_ascii=False)[1:-1],
    }


def hidden_texts(
    args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
    parameters: Sequence[str] | None = None,
) -> tuple[str, ...]:
    """The strings inside the hidden arguments of a call, longest first, as they may appear in a message.

    Each string of at least :data:`MIN_SCRUB_CHARS` characters is given as
    is and in its ``repr`` and JSON escapings, quoted once and twice, so a
    message that quotes the input (``ValueError(f"bad {input!r}")``) is
    scrubbed in the traceback and in ``repr(error)`` too.
    """
    names = tuple(parameters or ())
    hidden = [
        _hidden_part(names[position] if position < len(names) else None, value)
        for position, value in enumerate(args or ())
    ]
    hidden += [_hidden_part(str(key), value) for key, value in (kwargs or {}).items()]
    texts: set[str] = set()
    for leaf in _leaves(hidden):
        if len(leaf) < MIN_SCRUB_CHARS:
            continue
        texts.update(form for once in _escapings(leaf) for form in _escapings(once))
        if len(texts) >= _MAX_SCRUB_TEXTS:
            break
    return tuple(sorted(texts, key=len, reverse=True))


def _bounded(line: str, limit: int) -> str:
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... [{len(line) - limit} more chars hidden]"


def scrub(text: Any, secrets: Iterable[str] = (), *, limit: int = MAX_EXCEPTION_CHARS) -> Any:
    """``text`` with every one of ``secrets`` replaced by ``<hidden>`` and each line cut at ``limit`` chars.

    Anything that is not a string is returned unchanged.
    """
    if not isinstance(text, str):
        return text
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, _HIDDEN)
    return "\n".join(_bounded(line, limit) for line in text.split("\n"))


# -- producer: the app's AMQP ----------------------------------------------------------------------


def _task_parameters(app: Any, name: str) -> tuple[str, ...] | None:
    """Parameter names of ``app``'s task ``name`` when the app knows it (never finalizes the app)."""
    if not getattr(app, "finalized", False):
        return None
    task = app.tasks.get(name)
    return _parameter_names(task) if task is not None else None


def _redacted_message(build: Any, app: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``build`` (an ``as_task_v2``) with redacted reprs when the message is a private task's."""
    # Celery passes some twenty arguments, most of them by position: bind them by name.
    call = _AS_TASK_V2.bind(*args, **kwargs)
    name = call.arguments.get("name")
    if is_private(name):
        call.arguments["argsrepr"], call.arguments["kwargsrepr"] = redact_call(
            call.arguments.get("args"), call.arguments.get("kwargs"), _task_parameters(app, str(name))
        )
    return build(*call.args, **call.kwargs)


_signature = inspect.signature(AMQP.as_task_v2)
_AS_TASK_V2 = _signature.replace(parameters=list(_signature.parameters.values())[1:])  # without self


class RedactingAMQP(AMQP):  # type: ignore[misc]
    """The app's AMQP: every private task message gets redacted ``argsrepr``/``kwargsrepr``."""

    def as_task_v2(self, *args: Any, **kwargs: Any) -> Any:
        return _redacted_message(super().as_task_v2, self.app, *args, **kwargs)


def _use_redacting_amqp(app: Any) -> None:
    if "amqp" not in vars(app):
        app.amqp_cls = RedactingAMQP  # the documented extension point: ``Celery(amqp=...)``
        return
    amqp = app.amqp  # already built: route its protocol-2 messages through the redacting builder
    if isinstance(amqp, RedactingAMQP) or getattr(amqp.task_protocols[2], "_agentloop_private", False):
        return
    build = amqp.task_protocols[2]

    def as_task_v2(*args: Any, **kwargs: Any) -> Any:
        return _redacted_message(build, app, *args, **kwargs)

    as_task_v2._agentloop_private = True  # type: ignore[attr-defined]
    amqp.task_protocols[2] = as_task_v2
    vars(amqp).pop("create_task_message", None)


# -- worker: the request -----------------------------------------------------------------------------


class RedactingRequest(Request):  # type: ignore[misc]
    """A worker request whose reprs, ``info()`` and events hide a private task's arguments and result."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._private = is_private(self._type)
        if self._private:
            parameters = _parameter_names(self._task)
            self._agentloop_parameters = parameters
            argsrepr, kwargsrepr = redact_call(self._args, self._kwargs, parameters)
            self._argsrepr = self._request_dict["argsrepr"] = argsrepr
            self._kwargsrepr = self._request_dict["kwargsrepr"] = kwargsrepr

    def info(self, safe: bool = False) -> dict[str, Any]:
        """``inspect active|reserved|scheduled``: a private task is always described by its reprs."""
        described: dict[str, Any] = super().info(safe=safe or self._private)
        return described

    def _hidden_texts(self) -> tuple[str, ...]:
        return hidden_texts(self._args, self._kwargs, self._agentloop_parameters)

    def send_event(self, type: str, **fields: Any) -> None:
        if self._private:
            if "result" in fields:
                fields["result"] = hide_result(fields["result"], self._type)
            if "exception" in fields or "traceback" in fields:
                secrets = self._hidden_texts()
                for key in ("exception", "traceback"):
                    if key in fields:
                        fields[key] = scrub(fields[key], secrets)
        super().send_event(type, **fields)


# -- the one entry point ---------------------------------------------------------------------------


def install_privacy(app: Celery) -> None:
    """Hide the arguments and results of ``app``'s ``agentloop.*`` tasks from Flower and the logs.

    Idempotent. Sets the AMQP class of ``app`` (before its first message),
    the ``Request`` class of ``app``'s base task (so every task of the app,
    whenever registered, gets :class:`RedactingRequest`; it changes nothing
    for other tasks) and adds :class:`RedactingLogFilter` to Celery's worker
    loggers in this process.
    """
    _use_redacting_amqp(app)
    app.Task.Request = RedactingRequest
    from orchestration.celery_adapter.log_filter import install_log_filters  # it builds on this module

    install_log_filters()


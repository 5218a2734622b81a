"""Keep what agentloop tasks carry out of Flower, Celery's events and the worker logs.

The arguments of ``agentloop.*`` tasks hold prompts, user text and maybe
secrets (a run's input, its context spec, a stage's previous output); their
results hold model output. Celery shows both by default: in the events Flower
keeps, in ``celery inspect active`` and in the worker's log lines (``Task ...
succeeded in 0.1s: <result>``, a failure's message and traceback).
:func:`install_privacy` hides them while task names, ids, states and
identifiers stay readable; what is shown of a value is decided by
:mod:`agentloop.orchestration.redaction`.

Each part goes through an extension point Celery documents:

* **Producer** — :class:`PrivateAMQP`, the app's AMQP class (``Celery(amqp=...)``),
  fills the ``argsrepr``/``kwargsrepr`` calling arguments (Celery's Tasks guide,
  "Hiding sensitive information in arguments") of every ``agentloop.*``
  message the app builds: ``send_task``, canvas, ``Task.replace``, chord
  callbacks, Flower's ``send-task`` when Flower runs ``-A agentloop``.
  Message headers and ``task-sent`` events carry nothing else.
* **Worker** — :class:`RedactingRequest`, the ``Request`` class of the app's
  tasks (``Task.Request``), builds every request of a private task from
  headers whose reprs it recomputed from the decoded arguments (so messages
  from producers without this package are covered): they are what the
  ``received`` line, ``task-received``, the pool child's log lines and
  ``inspect active|reserved|scheduled`` show. Its events carry ``<hidden
  result ...>`` and exceptions scrubbed of the hidden arguments' text.
* **Logs** — :class:`~agentloop.orchestration.celery_adapter.log_filter.RedactingLogFilter`
  on Celery's worker loggers (:mod:`logging` filters).

Other tasks keep Celery's behaviour. The result backend (results, progress
meta, exceptions as raised; ``result_extended`` is off) is not redacted:
``docs/deployment.md`` says what that means for Flower.
"""

from __future__ import annotations

import inspect
from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from celery.worker.request import Request

from agentloop.orchestration.celery_adapter.log_filter import install_log_filters
from agentloop.orchestration.celery_adapter.wire_versions import stamp
from agentloop.orchestration.redaction import (
    hidden_texts,
    hide_result,
    is_private,
    parameter_names,
    redact_call,
    scrub,
)

__all__ = ["PrivateAMQP", "RedactingRequest", "install_privacy"]

_REPRS = ("argsrepr", "kwargsrepr")
#: Where ``argsrepr`` sits among ``as_task_v2``'s parameters after ``(task_id, name, args, kwargs)``.
#: Read from Celery's own signature, so a Celery that renamed it fails here, at import, not silently.
_ARGSREPR_AT = list(inspect.signature(AMQP.as_task_v2).parameters).index("argsrepr") - 5


def _task_parameters(app: Any, name: str) -> tuple[str, ...] | None:
    """Parameter names of ``app``'s task ``name`` when the app knows it (never finalizes the app)."""
    if not getattr(app, "finalized", False):
        return None
    task = app.tasks.get(name)
    return parameter_names(task.run) if task is not None else None


class PrivateAMQP(AMQP):  # type: ignore[misc]
    """The app's AMQP class: every ``agentloop.*`` message it builds gets redacted reprs.

    It fills the two documented calling arguments ``argsrepr`` and
    ``kwargsrepr``, which Celery writes into the message headers and the
    ``task-sent`` event; a private task's own reprs, if a caller gave some,
    are replaced, so there is one way of showing them. It also writes the
    app's wire version into the message's headers
    (:func:`~agentloop.orchestration.celery_adapter.wire_versions.stamp`): every
    message an app builds passes here. Nothing else of the message changes.
    """

    def as_task_v2(
        self, task_id: Any, name: Any, args: Any = None, kwargs: Any = None, *positional: Any, **options: Any
    ) -> Any:
        if is_private(name):
            reprs = redact_call(args, kwargs, _task_parameters(self.app, str(name)))
            given = len(
                positional[_ARGSREPR_AT : _ARGSREPR_AT + 2]
            )  # by position (Celery passes them by name)
            positional = (*positional[:_ARGSREPR_AT], *reprs[:given], *positional[_ARGSREPR_AT + 2 :])
            options.update(zip(_REPRS[given:], reprs[given:], strict=True))
        message = super().as_task_v2(task_id, name, args, kwargs, *positional, **options)
        stamp(self.app, name, message.headers, args, kwargs)
        return message


class RedactingRequest(Request):  # type: ignore[misc]
    """A worker request whose reprs, ``info()`` and events hide a private task's arguments and result.

    Built as Celery's worker strategy builds a request (keyword arguments
    only); for a private task the ``headers`` it hands on carry reprs
    recomputed by :func:`~agentloop.orchestration.redaction.redact_call`, whatever the
    producer wrote.
    """

    def __init__(self, message: Any, **options: Any) -> None:
        headers = message.headers if options.get("headers") is None else options["headers"]
        name = headers.get("task")
        parameters = None
        if is_private(name):
            # the arguments as Celery's Request reads them: the given body when decoded, else the message's
            body = options["body"] if options.get("decoded") else message.payload
            task = options.get("task") or options["app"].tasks[name]
            parameters = parameter_names(task.run)
            argsrepr, kwargsrepr = redact_call(body[0], body[1], parameters)
            options["headers"] = {**headers, "argsrepr": argsrepr, "kwargsrepr": kwargsrepr}
        super().__init__(message, **options)
        self.agentloop_private = is_private(name)
        self.agentloop_parameters = parameters

    def info(self, safe: bool = False) -> dict[str, Any]:
        """``inspect active|reserved|scheduled``: a private task is always described by its reprs."""
        described: dict[str, Any] = super().info(safe=safe or self.agentloop_private)
        return described

    def send_event(self, type: str, **fields: Any) -> None:
        """Send the event with a private task's result hidden and its exception texts scrubbed."""
        if self.agentloop_private:
            if "result" in fields:
                fields["result"] = hide_result(fields["result"], self.type)
            if "exception" in fields or "traceback" in fields:
                secrets = hidden_texts(self.args, self.kwargs, self.agentloop_parameters)
                for key in ("exception", "traceback"):
                    if key in fields:
                        fields[key] = scrub(fields[key], secrets)
        super().send_event(type, **fields)


def _use_private_amqp(app: Celery) -> None:
    # Celery builds ``app.amqp`` from ``app.amqp_cls`` on first use and keeps it (a cached property):
    # once built, its class can no longer be chosen.
    if "amqp" in vars(app):
        if isinstance(app.amqp, PrivateAMQP):
            return
        raise RuntimeError(
            "install_privacy() must run before the app builds its AMQP (before its first message): "
            "build the app with Celery(amqp=PrivateAMQP) or install privacy right after creating it"
        )
    app.amqp_cls = PrivateAMQP


def install_privacy(app: Celery) -> None:
    """Hide the arguments and results of ``app``'s ``agentloop.*`` tasks from Flower and the logs.

    Idempotent; call it before the app sends its first message. Sets the AMQP
    class of ``app`` (:class:`PrivateAMQP`), the ``Request`` class of ``app``'s
    base task (so every task of the app, whenever registered, gets
    :class:`RedactingRequest`; it changes nothing for other tasks) and adds
    the log filter to Celery's worker loggers in this process.

    Raises:
        RuntimeError: ``app`` already built its AMQP with another class.
    """
    _use_private_amqp(app)
    app.Task.Request = RedactingRequest
    install_log_filters()

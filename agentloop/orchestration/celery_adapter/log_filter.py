"""The worker log filter: Celery's trace, request and pool log lines name a private task's arguments and
result only by their redacted form (:mod:`agentloop.orchestration.redaction`).

It also drops the one line that says nothing about a private task: ``Task agentloop.launch[id] ignored``,
logged for every pipeline or composite task that replaces itself with its canvas.

Installed by :func:`agentloop.orchestration.celery_adapter.privacy.install_privacy` through :mod:`logging`'s
own
extension point, a :class:`logging.Filter` on Celery's loggers; the task being run is read with
Celery's public ``current_task``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from celery import current_task
from celery.app.trace import LOG_IGNORED, log_policy_ignore

from agentloop.orchestration.redaction import (
    HIDDEN,
    PRIVATE_PREFIX,
    hidden_texts,
    hide_result,
    is_private,
    parameter_names,
    redact_call,
    scrub,
)

__all__ = ["RedactingLogFilter", "install_log_filters"]

#: Celery's loggers whose records may carry a task's arguments, result or exception.
CELERY_LOGGERS = ("celery.app.trace", "celery.worker.request", "celery.worker.strategy", "celery.pool")
_POOL_APPLY = "TaskPool: Apply"
_TRACE_LOGGER = "celery.app.trace"
#: The message of the trace's ``ignored`` line, as Celery logs it (``policy.format.strip()``).
_LOG_IGNORED = LOG_IGNORED.strip()


class _CurrentCall:
    """The private task running in this process or thread (pool child), read only when a record needs it."""

    def __init__(self) -> None:
        running = bool(current_task) and is_private(getattr(current_task, "name", None))
        self.task: Any = current_task if running else None
        self.name = str(self.task.name) if self.task is not None else None
        self._secrets: tuple[str, ...] | None = None

    def _call(self) -> tuple[Any, Any, tuple[str, ...] | None]:
        assert self.task is not None
        request = self.task.request
        args, kwargs = getattr(request, "args", None), getattr(request, "kwargs", None)
        return args, kwargs, parameter_names(getattr(self.task, "run", None))

    def secrets(self) -> tuple[str, ...]:
        if self._secrets is None:
            self._secrets = hidden_texts(*self._call()) if self.task is not None else ()
        return self._secrets

    def reprs(self) -> tuple[str, str] | None:
        return redact_call(*self._call()) if self.task is not None else None


class RedactingLogFilter(logging.Filter):
    """Hide private tasks' results and scrub their exceptions in Celery's worker log records.

    * the success line (``Task agentloop.run[id] succeeded in 0.1s: <hidden result, 57 chars>``);
    * failure, retry and internal-error lines: the exception and the traceback
      lose the text of the hidden arguments and are cut at
      :data:`~agentloop.orchestration.redaction.MAX_EXCEPTION_CHARS` per line;
    * the ``args``/``kwargs`` handed to custom handlers (``record.data``) are the redacted reprs;
    * the pool's ``DEBUG`` line ``TaskPool: Apply ...`` no longer dumps a private message;
    * the ``Task agentloop.launch[id] ignored`` line of a task that replaced itself
      with its canvas (every pipeline and composite) is dropped: it is the only record
      the filter drops.

    Records of other tasks pass unchanged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            if _is_private_ignore(record):
                return False
            if isinstance(record.args, Mapping):
                self._redact_context(record, record.args)
            elif isinstance(record.msg, str) and record.msg.startswith(_POOL_APPLY):
                self._redact_pool_apply(record)
            elif record.exc_info or record.args:
                current = _CurrentCall()
                if current.name is not None:
                    secrets = current.secrets()
                    record.args = tuple(scrub(_text(arg), secrets) for arg in _as_tuple(record.args))
                    self._scrub_exc_info(record, secrets)
        except Exception:  # a filter must never break logging; hide rather than show on failure
            record.args = ()
            record.msg = f"<log record of {record.name} hidden: the privacy filter failed>"
            record.exc_info = None
            record.exc_text = None
        return True

    @staticmethod
    def _redact_context(record: logging.LogRecord, args: Mapping[str, Any]) -> None:
        name = args.get("name")
        if not is_private(name):
            return
        current = _CurrentCall()
        context = dict(args)
        if "return_value" in context:
            context["return_value"] = hide_result(context["return_value"], name)
        for key in ("exc", "traceback"):
            if key in context:
                context[key] = scrub(context[key], current.secrets())
        reprs = current.reprs() if current.name == name else None
        if reprs is not None:
            context["args"], context["kwargs"] = reprs
        record.args = context
        if hasattr(record, "data"):
            record.data = context
        if record.exc_info:
            RedactingLogFilter._scrub_exc_info(record, current.secrets())

    @staticmethod
    def _scrub_exc_info(record: logging.LogRecord, secrets: Sequence[str]) -> None:
        if record.exc_info and not record.exc_text:
            exc_info = record.exc_info
            if not isinstance(exc_info, tuple):
                return
            record.exc_text = scrub(logging.Formatter().formatException(exc_info), secrets)

    @staticmethod
    def _redact_pool_apply(record: logging.LogRecord) -> None:
        args = _as_tuple(record.args)
        if len(args) >= 3 and f"'{PRIVATE_PREFIX}" in str(args[1])[:200]:
            record.args = (args[0], HIDDEN, HIDDEN)


def _is_private_ignore(record: logging.LogRecord) -> bool:
    """Celery's ``Task agentloop.launch[id] ignored`` line: a private task that replaced itself.

    Every pipeline or composite task replaces itself with its canvas
    (``Task.replace`` raises Celery's ``Ignore``); the line says nothing an
    operator can act on. Other tasks' ``ignored`` lines stay.
    """
    args = record.args
    return (
        record.name == _TRACE_LOGGER
        and record.msg == _LOG_IGNORED
        and isinstance(args, Mapping)
        and args.get("description") == log_policy_ignore.description
        and is_private(args.get("name"))
    )


def _as_tuple(args: Any) -> tuple[Any, ...]:
    if args is None:
        return ()
    return args if isinstance(args, tuple) else (args,)


def _text(value: Any) -> Any:
    if isinstance(value, BaseException):
        return repr(value)
    return value


_FILTER = RedactingLogFilter()


def install_log_filters() -> None:
    """Attach :class:`RedactingLogFilter` to Celery's worker loggers once per process."""
    for name in CELERY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactingLogFilter) for existing in logger.filters):
            logger.addFilter(_FILTER)

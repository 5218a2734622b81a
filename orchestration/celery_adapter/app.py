"""The one factory that builds agentloop's Celery app, and safe display of its settings.

The core never reaches for ``current_app`` or ``shared_task``: every task is
registered on the app :func:`create_app` returns, and that app does not make
itself Celery's current or default app. ``orchestration.celery`` holds the
deployed instance for ``celery -A orchestration worker|beat|flower``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from celery import Celery

__all__ = ["PING_TASK_NAME", "create_app", "describe_app", "redact_url"]

#: Name of the built-in health-check task; it returns ``"pong"``.
PING_TASK_NAME = "agentloop.ping"

_MASK = "***"
_SECRET_QUERY_KEYS = frozenset({"password", "passwd", "pwd", "secret", "token", "access_key", "secret_key"})


def create_app(
    *,
    config: object | str = "celeryconfig",
    overrides: Mapping[str, Any] | None = None,
    main: str = "agentloop",
) -> Celery:
    """Build a Celery app configured from ``config``, with agentloop's tasks registered.

    Args:
        config: a settings module, its dotted name, or any object whose
            attributes are Celery settings (``app.config_from_object``). The
            default, ``celeryconfig``, reads the environment when first
            imported.
        overrides: settings that win over ``config`` (lowercase Celery names),
            e.g. ``{"broker_url": ..., "result_backend": ...}`` in tests.
        main: the app's main name (prefix of auto-generated task names).

    The app is created with ``set_as_current=False`` and is never made the
    default app, so code that falls back on ``current_app`` cannot find it by
    accident. ``orchestration.celery_adapter.tasks.install_tasks`` registers the framework's
    tasks; :data:`PING_TASK_NAME` is registered here.
    """
    from orchestration.celery_adapter import patches as compat
    from orchestration.celery_adapter.tasks import (
        install_tasks,
    )  # imported late: orchestration.celery_adapter.tasks may import this module

    compat.install()
    app = Celery(main, set_as_current=False)
    app.config_from_object(config)
    if overrides:
        app.conf.update(dict(overrides))
    install_tasks(app)
    _install_ping(app)
    return app


def _ping() -> str:
    """Health check: answers ``"pong"`` as soon as a worker takes it."""
    return "pong"


def _install_ping(app: Celery) -> None:
    """Register :data:`PING_TASK_NAME` on ``app`` only (``shared=False``: no other app gets it)."""
    app.task(name=PING_TASK_NAME, shared=False)(_ping)


def describe_app(app: Celery) -> dict[str, Any]:
    """The settings worth showing an operator, with every password redacted.

    Reads configuration only; nothing connects to the broker or the backend.
    """
    conf = app.conf
    return {
        "main": app.main,
        "broker": redact_url(str(conf.broker_url)) if conf.broker_url else None,
        "result_backend": redact_url(str(conf.result_backend)) if conf.result_backend else None,
        "default_queue": conf.task_default_queue,
        "imports": list(conf.imports or ()),
        "task_soft_time_limit": conf.task_soft_time_limit,
        "task_time_limit": conf.task_time_limit,
        "visibility_timeout": (conf.broker_transport_options or {}).get("visibility_timeout"),
        "serializers": {
            "task": conf.task_serializer,
            "result": conf.result_serializer,
            "accept": sorted(conf.accept_content or ()),
        },
    }


def redact_url(url: str) -> str:
    """``url`` with its password (and password-like query values) replaced by ``***``.

    ``amqp://guest:secret@host:5672//`` -> ``amqp://guest:***@host:5672//``;
    ``redis://:secret@host/0`` -> ``redis://:***@host/0``. Several URLs
    separated by ``;`` (kombu's failover list) are each redacted. A URL with
    no password is returned unchanged; text that is not a URL is returned
    as given.
    """
    if ";" in url:
        return ";".join(redact_url(part) for part in url.split(";"))
    try:
        parts = urlsplit(url)
    except ValueError:
        return _MASK  # unparsable: show nothing rather than a secret
    netloc = parts.netloc
    userinfo, at, hostinfo = netloc.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if colon and password:
            netloc = f"{user}:{_MASK}@{hostinfo}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key.lower() in _SECRET_QUERY_KEYS for key, _ in pairs):
            query = urlencode(
                [(key, _MASK if key.lower() in _SECRET_QUERY_KEYS else value) for key, value in pairs],
                safe="*/:",
            )
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))

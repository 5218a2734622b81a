"""What agentloop shows of values that may hold secrets: task arguments and results, error texts, URLs.

Pure functions on plain values (no Celery, no I/O), used wherever something is
written for people to read: the Celery adapter's privacy layer (message reprs,
worker events, log lines), the CLI and the model layer (broker, database and
model-server URLs).

* :func:`redact_call` turns the arguments of an ``agentloop.*`` task into the
  ``argsrepr``/``kwargsrepr`` strings Celery shows: identifiers and knobs as
  they are, everything else as a size hint (:func:`describe_hidden`)::

      kwargs: {'runnable': 'record_search.demo', 'input': <hidden dict 123 chars>, 'context': None}
      args:   (previous=<hidden list 88 chars>, node=<node runnable='record_search.demo' path=''
               run_id='r-1'>, index=1, input=<hidden dict 123 chars>)

* :func:`hide_result` stands for a result: ``<hidden result, 57 chars>``.
* :func:`hidden_texts` and :func:`scrub` take the hidden arguments' text out
  of an error message or traceback, whatever the quoting, and bound its lines.
* :func:`redact_url` masks the password and password-like query values of a URL.

Shown are the parameters in :data:`SHOWN_PARAMETERS` whose value is a short
scalar, and a ``node``'s runnable, path and run id.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from agentloop.orchestration.wire import CANCEL, DEGRADED_KEY, PING

__all__ = [
    "MAX_EXCEPTION_CHARS",
    "MAX_SHOWN_CHARS",
    "MIN_SCRUB_CHARS",
    "PRIVATE_PREFIX",
    "SHOWN_PARAMETERS",
    "VISIBLE_RESULTS",
    "context_secrets",
    "describe_hidden",
    "hidden_texts",
    "hide_result",
    "is_private",
    "parameter_names",
    "redact_call",
    "redact_url",
    "scrub",
    "scrub_error",
    "scrub_values",
]

#: Tasks whose name starts with this are private: their arguments and results are hidden.
PRIVATE_PREFIX = "agentloop."

#: Parameters shown as they are when their value is a short scalar (identifiers and knobs, never content).
SHOWN_PARAMETERS = frozenset(
    {
        # agentloop.launch / progress / cancel / finalize / stage / stages / merge
        "runnable",
        "run_id",
        "index",
        "count",
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
VISIBLE_RESULTS = frozenset({CANCEL, PING})

#: Longest string shown for a shown parameter; longer ones are hidden.
MAX_SHOWN_CHARS = 200
#: Longest exception message (and traceback line) kept in logs and events.
MAX_EXCEPTION_CHARS = 500
#: Shortest string of a hidden argument that is scrubbed from exception texts.
MIN_SCRUB_CHARS = 6

#: What a scrubbed secret is replaced with.
HIDDEN = "<hidden>"

_MAX_SCRUB_TEXTS = 1000
_MAX_DEPTH = 32
_NODE_FIELDS = ("runnable", "path", "run_id")
_URL_MASK = "***"
_SECRET_QUERY_KEYS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "secret",
        "token",
        "access_key",
        "secret_key",
        "access_token",
        "api_key",
        "api-key",
        "apikey",
        "key",
        "sig",
        "signature",
    }
)


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


#: The shown parameters that are numbers: a string in one is shown as any hidden value is.
_NUMBERS = frozenset(
    {"index", "count", "after_id", "limit", "offset", "chunk_size", "token_budget", "max_seconds"}
)


def _is_shown(name: str | None, value: Any) -> bool:
    if name in _NUMBERS and isinstance(value, str):  # a refused value may be a pasted secret
        return False
    return name in SHOWN_PARAMETERS and _is_short_scalar(value)


def _describe(name: str | None, value: Any) -> str:
    if name == "node":
        return _describe_node(value)
    return repr(value) if _is_shown(name, value) else describe_hidden(value)


def _hidden_part(name: str | None, value: Any) -> Any:
    """What of an argument is hidden: a node's context spec and owner token, a shown scalar nothing,
    anything else all."""
    if name == "node":
        return [value.get("context"), value.get("owner_token")] if isinstance(value, Mapping) else value
    return None if _is_shown(name, value) else value


@lru_cache(maxsize=1024)
def _positional_names(function: Callable[..., Any]) -> tuple[str, ...] | None:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    return tuple(
        parameter.name
        for parameter in parameters
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    )


def parameter_names(function: Callable[..., Any] | None) -> tuple[str, ...] | None:
    """The names ``function`` takes by position, in order (a bound method's without ``self``).

    ``None`` when there is no function or its signature cannot be read; a
    task's are ``parameter_names(task.run)``. Cached by the plain function,
    so a bound method keeps neither its task nor its app alive.
    """
    if function is None:
        return None
    plain = getattr(function, "__func__", function)
    try:
        names = _positional_names(plain)
    except TypeError:  # not hashable: read it uncached
        names = _positional_names.__wrapped__(plain)
    if names and plain is not function:
        return names[1:]  # bound: without the instance it is bound to
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
    """What a private task's result repr is shown as: ``<hidden result, 57 chars>`` (``None`` stays;
    a degraded run's result keeps its mark: ``<hidden result, 57 chars; run degraded>``)."""
    if name in VISIBLE_RESULTS or result_repr is None or result_repr == "None":
        return result_repr
    text = str(result_repr)
    mark = "; run degraded" if text.startswith((f"{{'{DEGRADED_KEY}'", f'{{"{DEGRADED_KEY}"')) else ""
    return f"<hidden result, {len(text)} chars{mark}>"


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
            text = text.replace(secret, HIDDEN)
    return "\n".join(_bounded(line, limit) for line in text.split("\n"))


# -- URLs ------------------------------------------------------------------------------------------


def _masked_query(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(key.lower() in _SECRET_QUERY_KEYS for key, _ in pairs):
        return query
    return urlencode(
        [(key, _URL_MASK if key.lower() in _SECRET_QUERY_KEYS else value) for key, value in pairs],
        safe="*/:",
    )


def redact_url(url: str) -> str:
    """``url`` with its password, password-like query values and fragment hidden (for logs and display).

    ``amqp://guest:secret@host:5672//`` -> ``amqp://guest:***@host:5672//``;
    ``redis://:secret@host/0`` -> ``redis://:***@host/0``;
    ``https://h/v1?api-key=k`` -> ``https://h/v1?api-key=***``. Several URLs
    separated by ``;`` (kombu's failover list) are each redacted. A URL with
    nothing to hide is returned unchanged; text that cannot be parsed as a
    URL is shown as ``<unparsable url>``.
    """
    if ";" in url:
        return ";".join(redact_url(part) for part in url.split(";"))
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"  # show nothing rather than a secret
    netloc = parts.netloc
    userinfo, at, hostinfo = netloc.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if colon and password:
            netloc = f"{user}:{_URL_MASK}@{hostinfo}"
    query = _masked_query(parts.query) if parts.query else ""
    if netloc == parts.netloc and query == parts.query and not parts.fragment:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


# -- errors that quote a context ------------------------------------------------------------------


def context_secrets(context: Mapping[str, Any]) -> tuple[str, ...]:
    """The strings of a node's context spec, in every form an error's text may quote them."""
    return hidden_texts(None, {"context": dict(context)}) if context else ()


def scrub_error(error: BaseException, secrets: Sequence[str]) -> BaseException:
    """``error`` (and the errors it was raised from) with ``secrets`` taken out of its text.

    The exception is changed in place and returned: its text is what the result backend
    stores, what the run record keeps and what a collecting composite receives.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while secrets and current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        if any(secret in text for secret in secrets):
            current.args = (scrub(text, secrets),)
        current = current.__cause__ or current.__context__
    return error


def scrub_values(value: Any, secrets: Sequence[str]) -> Any:
    """JSON ``value`` with ``secrets`` taken out of every string in it (keys included), unbounded:
    what a recording keeps (``orchestration/store/recordings.py``) is the run's own content, never
    a key it was sent with."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            if secret and secret in value:
                value = value.replace(secret, HIDDEN)
        return value
    if isinstance(value, Mapping):
        return {scrub_values(str(key), secrets): scrub_values(item, secrets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_values(item, secrets) for item in value]
    return value

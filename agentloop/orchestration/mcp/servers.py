"""``McpServer``: one MCP server, configured once: how to reach it, which of its tools to use,
and the limits of a call.

A server is reached over stdio (``command``: the process is started for a call and stopped after
it, so a server that exited is simply started again for the next call) or Streamable HTTP
(``url`` with ``headers``). Header values and the ``env`` given to a stdio server are secrets:
take them from your settings; they never appear in a ``repr``, a log line, an event, an error,
a recording or a metric (every message of this package is scrubbed of them).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentloop.actions.degradation import ModelFailurePolicy
from agentloop.orchestration.errors import McpConfigError
from agentloop.orchestration.redaction import redact_url, scrub

#: A result larger than this (its content as JSON, in bytes) is refused (``McpResultRefusedError``).
DEFAULT_MAX_RESULT_BYTES = 1_000_000
#: Seconds one tool call may take (the run's deadline may cut it shorter).
DEFAULT_CALL_SECONDS = 60.0
#: Seconds the tool list read from a server is kept in this process before it is read again.
DEFAULT_LIST_SECONDS = 300.0


@dataclass(frozen=True, kw_only=True, repr=False)
class McpServer:
    """One MCP server (module doc). Build it with :meth:`stdio` or :meth:`http`.

    ``include`` / ``exclude``: tool names (``fnmatch`` patterns) offered as actions; ``prefix``
    goes before each tool's name to make its action's name (and its ``AiTool`` id);
    ``on_outage``: a server down, too slow, or dying in a call ``degrade``\\ s the run (the
    default: the step sees :class:`~agentloop.orchestration.errors.McpUnavailableError`, an
    AI-driven loop shows the model a tool error) or ``fail``\\ s it.
    """

    name: str
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    prefix: str = ""
    call_seconds: float = DEFAULT_CALL_SECONDS
    list_seconds: float = DEFAULT_LIST_SECONDS
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    on_outage: ModelFailurePolicy = ModelFailurePolicy.DEGRADE

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise McpConfigError(f"an MCP server's name must be letters, digits, '-' or '_': {self.name!r}")
        if bool(self.command) == bool(self.url):
            raise McpConfigError(
                f"MCP server {self.name!r}: give a command (stdio) or a url (HTTP), one of them"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise McpConfigError(f"MCP server {self.name!r}: the url must be http:// or https://")
        if self.call_seconds <= 0 or self.list_seconds < 0 or self.max_result_bytes <= 0:
            raise McpConfigError(f"MCP server {self.name!r}: call_seconds, max_result_bytes must be > 0")
        object.__setattr__(self, "on_outage", ModelFailurePolicy(self.on_outage))

    @classmethod
    def stdio(
        cls,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **options: object,
    ) -> McpServer:
        """A server started as ``command`` (program and arguments) and spoken to over its stdio."""
        return cls(name=name, command=tuple(command), env=dict(env or {}), cwd=cwd, **options)  # type: ignore[arg-type]

    @classmethod
    def http(
        cls, name: str, url: str, *, headers: Mapping[str, str] | None = None, **options: object
    ) -> McpServer:
        """A server at ``url`` over Streamable HTTP, every request carrying ``headers``."""
        return cls(name=name, url=url, headers=dict(headers or {}), **options)  # type: ignore[arg-type]

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "stdio" if self.command else "http"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The texts no message may show: header and environment values, the URL's password."""
        values = [*self.headers.values(), *self.env.values()]
        return tuple(sorted({value for value in values if value}, key=len, reverse=True))

    def hide(self, text: str) -> str:
        """``text`` with this server's secrets hidden."""
        hidden = str(scrub(text, self.secrets))
        if self.url is not None and self.url in hidden:
            hidden = hidden.replace(self.url, redact_url(self.url))
        return hidden

    def where(self) -> str:
        """The server for people: its name and transport, never a secret."""
        if self.url is not None:
            return f"MCP server {self.name!r} ({redact_url(self.url)})"
        return f"MCP server {self.name!r} (stdio: {self.hide(self.command[0])})"

    def offers(self, tool: str) -> bool:
        """Whether ``tool`` passes the ``include`` / ``exclude`` filter."""
        if self.include is not None and not any(fnmatch.fnmatchcase(tool, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.exclude)

    def action_name(self, tool: str) -> str:
        """The name of the action (and the ``AiTool`` id) of ``tool``."""
        return f"{self.prefix}{tool}"

    def __repr__(self) -> str:
        return f"McpServer({self.where()})"

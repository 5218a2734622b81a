"""MCP (Model Context Protocol), on the official ``mcp`` SDK (the ``mcp`` extra).

- ``servers.py``: :class:`McpServer`, one server configured once (stdio or Streamable HTTP);
- ``session.py``: one session per call: the tool list, a call's outcome, the limits;
- ``journal.py``: a completed call kept with the branch's checkpoints (no second call on resume);
- ``tools.py``: :class:`McpToolset` and :class:`McpToolAction`, a server's tools as actions;
- ``sync.py``: their schemas in the ``AiTool`` table (``agentloop tools sync``), drift reported;
- ``serve.py``: ``agentloop mcp serve``, the registered runnables as an MCP server's tools.
"""

"""The how-to "Use MCP servers' tools" (``docs/how-to/mcp.md``): its server and its agent run as
written, against each other, and print what the page says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.docs.docs_pages import section

PAGE = "docs/how-to/mcp.md"


def test_the_server_and_the_agent_of_the_page_run_as_written(tmp_path: Path) -> None:
    server, agent = section(PAGE, "## A server's tools as actions")
    (tmp_path / "weather_server.py").write_text(server.code)
    (tmp_path / "agent.py").write_text(agent.code)
    printed = [line[2:] for line in agent.code.splitlines() if line.startswith("# ") and line != "# agent.py"]

    done = subprocess.run(
        [sys.executable, "agent.py"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == printed

"""The mkdocs hook (``hooks:`` in ``mkdocs.yml``): generated parts of pages, and the build's checks.

Each ``<!-- generated: NAME -->`` line of a page becomes the Markdown :data:`GENERATORS` makes for
``NAME``; an unknown name fails the build, as does a public name without a docstring (checked when
the public API page is generated).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # mkdocs loads a hook by its path: make the repository importable
    sys.path.insert(0, str(ROOT))

from mkdocs.exceptions import PluginError  # noqa: E402

from docs.hooks import api, cli, graphql, settings, wire  # noqa: E402

#: What each marker becomes.
GENERATORS: dict[str, Callable[[], str]] = {
    "api": api.public_api,
    "testing-api": api.testing_api,
    "cli": cli.cli_reference,
    "settings": settings.settings_reference,
    "graphql": graphql.graphql_reference,
    "wire-tasks": wire.task_reference,
    "wire-launch": wire.launch_reference,
    "wire-progress": wire.progress_reference,
}

MARKER = re.compile(r"^<!-- generated: (?P<name>[\w-]+) -->$", re.MULTILINE)


def expand(markdown: str, where: str) -> str:
    """``markdown`` with every marker replaced by its generated part."""

    def generated(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in GENERATORS:
            raise PluginError(
                f"{where}: no generator for <!-- generated: {name} --> (known: {sorted(GENERATORS)})"
            )
        return GENERATORS[name]()

    return MARKER.sub(generated, markdown)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """mkdocs' event: a page's Markdown before it is converted."""
    return expand(markdown, page.file.src_uri)

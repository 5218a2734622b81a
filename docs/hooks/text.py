"""What the generators share: docstring text made fit for Markdown."""

from __future__ import annotations

import re

#: A Sphinx cross-reference role, as the docstrings write them (``:class:`~agentloop.X```).
ROLE = re.compile(r":(?:class|func|mod|data|attr|meth|exc|obj):`(?P<tilde>~?)(?P<target>[^`]+)`")


def roles_to_code(text: str) -> str:
    """Sphinx roles as inline code: ``:class:`~a.b.C``` is ```C```, ``:mod:`a.b``` is ```a.b```."""

    def code(match: re.Match[str]) -> str:
        target = match["target"]
        return f"`{target.rsplit('.', 1)[-1] if match['tilde'] else target}`"

    return ROLE.sub(code, text)


def cell(text: object) -> str:
    """``text`` as one Markdown table cell: roles as code, lines joined, pipes escaped."""
    return " ".join(roles_to_code(str(text)).split()).replace("|", "\\|")

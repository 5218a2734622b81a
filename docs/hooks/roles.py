"""A griffe extension (``mkdocs.yml``): the docstrings' reStructuredText habits read as Markdown.

The code's docstrings cross-reference with Sphinx roles (``:class:`X```) and open literal blocks
with ``::``; mkdocstrings would show both as written. The roles become inline code (never a link
that could break the strict build), and ``text::`` becomes ``text:`` before its indented block.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

from docs.hooks.text import roles_to_code

LITERAL_BLOCK = re.compile(r"(?<=\S)::$", re.MULTILINE)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = LITERAL_BLOCK.sub(":", roles_to_code(obj.docstring.value))

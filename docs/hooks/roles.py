"""A griffe extension (``mkdocs.yml``): the docstrings' Sphinx roles rendered as inline code.

The code's docstrings cross-reference with Sphinx roles (``:class:`X```); mkdocstrings would show
them as written. They become inline code, never a link that could break the strict build.
"""

from __future__ import annotations

from typing import Any

import griffe

from docs.hooks.text import roles_to_code


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = roles_to_code(obj.docstring.value)

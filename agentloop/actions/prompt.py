"""Embedding user text in an instruction so that it stays in its place.

One helper, :func:`embed_user_text`, wraps text in an XML element whose body is
CDATA. Whatever the text holds (closing tags, ``]]>``, fake instructions), it
cannot end the element early: every ``]]>`` inside it is split across two CDATA
sections, and every carriage return is written as the character reference
``&#13;`` between two sections (XML readers turn a raw CR into a line feed), so
an XML reader gets back exactly the original text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_TAG = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
# Characters XML 1.0 cannot carry at all; replaced so the element always parses.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def embed_user_text(tag: str, text: str) -> str:
    """Return ``<tag><![CDATA[text]]></tag>``, safe for any ``text``.

    ``tag`` must be a plain XML name chosen by the code, never by the user.
    Characters that XML cannot carry at all are replaced by U+FFFD.
    """
    if not _TAG.match(tag) or tag.lower().startswith("xml"):
        raise ValueError(f"not a plain XML tag name: {tag!r}")
    if not isinstance(text, str):
        raise TypeError(f"user text must be str, not {type(text).__name__}")
    body = _NOT_XML.sub("\ufffd", text).replace("]]>", "]]]]><![CDATA[>").replace("\r", "]]>&#13;<![CDATA[")
    return f"<{tag}><![CDATA[{body}]]></{tag}>"


def embed_user_fields(fields: Mapping[str, str]) -> str:
    """Embed several named pieces of user text, one element per line."""
    return "\n".join(embed_user_text(tag, text) for tag, text in fields.items())

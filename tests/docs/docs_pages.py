"""The code blocks of the README and of the documentation site's pages, read as a test needs them.

A block is found under the heading it follows; a block that is not meant to run carries a
``<!-- not run: REASON -->`` line just before it (an HTML comment: readers do not see it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>.+?) -->")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: README.md, docs/tutorial.md, ...
    heading: str
    language: str
    code: str
    not_run: str | None  # the reason, when the block says it is not run

    @property
    def key(self) -> tuple[str, str, str]:
        return self.page, self.heading, self.code.splitlines()[0] if self.code else ""


def pages() -> list[Path]:
    """README.md and every Markdown page of the site (the build hooks' folder aside)."""
    found = [ROOT / "README.md"]
    found += sorted(path for path in DOCS.rglob("*.md") if "hooks" not in path.relative_to(DOCS).parts)
    return found


def blocks_of(path: Path) -> list[Block]:
    """Every fenced block of a page, under the heading it follows."""
    page = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    heading, fence, before = "", None, ""
    body: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if fence is not None:
            if line.startswith("```"):
                marker = NOT_RUN.fullmatch(before.strip())
                blocks.append(
                    Block(page, heading, fence, "\n".join(body), marker["reason"] if marker else None)
                )
                fence, body, before = None, [], line
            else:
                body.append(line)
            continue
        if line.startswith("```"):
            fence = line[3:].strip()
            continue
        if line.startswith("#"):
            heading = line
        if line.strip():
            before = line
    assert fence is None, f"{page} ends inside a code block"
    return blocks


def all_blocks() -> list[Block]:
    return [block for path in pages() for block in blocks_of(path)]


def section(page: str, heading: str) -> list[Block]:
    """The blocks of ``page`` under ``heading``, in order."""
    return [block for block in blocks_of(ROOT / page) if block.heading == heading]

"""Configuration is read in one place: only ``orchestration/settings/loading.py`` reads the environment.

Every other module receives a :class:`~agentloop.orchestration.settings.Settings`. The
test servers' launchers (``tests/services/``, not installed) read their own
``AGENTLOOP_TEST_*`` and ``CI`` variables, which configure the test infrastructure,
not agentloop; they are not scanned.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = sorted(path for path in (ROOT / "agentloop").rglob("*.py") if "__pycache__" not in path.parts)
ALLOWED = (ROOT / "agentloop" / "orchestration" / "settings" / "loading.py",)

#: ``os`` functions and mappings that read or write the process environment.
ENV_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})


def environment_reads(source: str) -> Iterator[tuple[int, str]]:
    """``(line, what)`` for every place ``source`` reaches the process environment."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ENV_NAMES:
            yield node.lineno, ast.unparse(node)  # os.environ, os.getenv, _os.environ, ...
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            for alias in node.names:
                if alias.name in ENV_NAMES:
                    yield node.lineno, f"from os import {alias.name}"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "environ" and node.attr in {"get", "items", "keys", "values", "copy"}:
                yield node.lineno, ast.unparse(node)  # environ.get(...) on an imported or passed environ
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "environ"
        ):
            yield node.lineno, ast.unparse(node)


def is_allowed(path: Path) -> bool:
    return any(path == allowed or allowed in path.parents for allowed in ALLOWED)


def test_the_scan_finds_every_way_of_reading_the_environment() -> None:
    source = """
import os
import os as _os
from os import environ, getenv
a = os.environ.get("A")
b = _os.environ["B"]
c = getenv("C") or os.getenv("C")
d = environ.get("D")
e = environ["E"]
"""
    found = [what for _, what in environment_reads(source)]
    assert "from os import environ" in found and "from os import getenv" in found
    assert {"os.environ", "_os.environ", "os.getenv", "environ.get", "environ['E']"} <= set(found)
    assert list(environment_reads("settings = load_settings()\nvalue = mapping.get('environ')\n")) == []


def test_the_scan_covers_the_packages_and_celeryconfig() -> None:
    assert ROOT / "agentloop" / "celeryconfig.py" in SCANNED
    assert ROOT / "agentloop" / "orchestration" / "settings" / "loading.py" in SCANNED
    assert any(path.parent.name == "llm" for path in SCANNED)
    assert any("servers" in path.parts for path in SCANNED)  # the model servers users test against


def test_only_the_settings_module_reads_the_environment() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in SCANNED
        if not is_allowed(path)
        for line, what in environment_reads(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "read the environment outside orchestration/settings/loading.py:\n" + "\n".join(
        offenders
    )


def test_the_settings_module_does_read_it() -> None:
    source = (ROOT / "agentloop" / "orchestration" / "settings" / "loading.py").read_text(encoding="utf-8")
    assert [what for _, what in environment_reads(source)] == ["os.environ"]

"""The core stays pure: ``actions``, ``loops`` and ``pipelines`` import no infrastructure.

DESIGN §2: dependency direction is one way, ``actions <- loops <- pipelines <-
orchestration``; every business dependency reaches the core through ``context``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "agentloop"
CORE = ("actions", "loops", "pipelines")
FORBIDDEN = frozenset({"celery", "kombu", "redis", "sqlalchemy", "openai", "anthropic"})
#: The parts of the installed package the core may import: itself. The front (``agentloop``),
#: orchestration, the examples, the kit and the deployed app are all above it.
CORE_MODULES = tuple(f"agentloop.{package}" for package in CORE)
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


def module_name(path: Path) -> str:
    """The installed name of a core file: ``actions/base.py`` is ``agentloop.actions.base``."""
    parts = ["agentloop", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_forbidden(name: str) -> bool:
    top = name.split(".")[0]
    if top == "agentloop":
        return not any(name == core or name.startswith(f"{core}.") for core in CORE_MODULES)
    return top in FORBIDDEN or top in CORE or top == "orchestration"


def imported_modules(source: str, *, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every module ``source`` imports, absolute, with its line (relative imports resolved)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                prefix = [*base, *(node.module.split(".") if node.module else [])]
                names = (
                    [".".join(prefix)] if node.module else [".".join([*prefix, a.name]) for a in node.names]
                )
                found += [(node.lineno, name) for name in names]
            else:
                found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in DYNAMIC_IMPORTERS and node.args and isinstance(node.args[0], ast.Constant):
                found.append((node.lineno, str(node.args[0].value)))
    return found


def forbidden_imports(source: str, *, module: str, is_package: bool = False) -> list[str]:
    return [
        f"{module}:{line} imports {name}"
        for line, name in imported_modules(source, module=module, is_package=is_package)
        if is_forbidden(name)
    ]


def core_modules() -> list[Path]:
    return sorted(path for package in CORE for path in (ROOT / package).rglob("*.py"))


def test_the_core_packages_exist_and_have_modules() -> None:
    assert {path.relative_to(ROOT).parts[0] for path in core_modules()} == set(CORE)


@pytest.mark.parametrize("path", core_modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_core_module_imports_infrastructure_or_orchestration(path: Path) -> None:
    violations = forbidden_imports(
        path.read_text(encoding="utf-8"), module=module_name(path), is_package=path.name == "__init__.py"
    )

    assert violations == []


@pytest.mark.parametrize(
    ("source", "module", "is_package"),
    [
        ("import celery", "agentloop.loops.base", False),
        ("import kombu.utils", "agentloop.loops.base", False),
        ("import os, redis as r", "agentloop.loops.base", False),
        ("from sqlalchemy.orm import Session", "agentloop.loops.base", False),
        ("from openai import AsyncOpenAI", "agentloop.actions.model", False),
        ("from agentloop.testing import ScriptedModel", "agentloop.pipelines.pipeline", False),
        ("from agentloop.testing import ScriptedModel", "agentloop.pipelines.pipeline", False),
        ("from agentloop import BaseAgentLoop", "agentloop.pipelines.pipeline", False),
        ("import agentloop", "agentloop.loops.base", False),
        ("from actions.errors import AgentLoopError", "agentloop.loops.base", False),
        ("from .. import orchestration", "agentloop.loops.base", False),
        ("from ..orchestration.celery_adapter.app import create_app", "agentloop.pipelines.pipeline", False),
        ("from . import orchestration", "agentloop", True),
        ("def f():\n    import celery", "agentloop.loops.base", False),
        ("try:\n    import redis\nexcept ImportError:\n    pass", "agentloop.loops.base", False),
        ("import importlib\nimportlib.import_module('celery.canvas')", "agentloop.loops.base", False),
        ("__import__('openai')", "agentloop.loops.base", False),
    ],
)
def test_the_boundary_check_catches_every_form_of_import(source: str, module: str, is_package: bool) -> None:
    assert forbidden_imports(source, module=module, is_package=is_package) != []


@pytest.mark.parametrize(
    "source",
    [
        "import asyncio",
        "from agentloop.actions.errors import AgentLoopError",
        "from .errors import AgentLoopError",
        "from . import errors",
        "import celeryconfig_like_name_is_not_celery",
        "from agentloop.loops.redisplay import x",
    ],
)
def test_the_boundary_check_allows_the_core_and_the_standard_library(source: str) -> None:
    assert forbidden_imports(source, module="agentloop.actions.base") == []


def test_importing_the_core_loads_no_infrastructure_module() -> None:
    script = textwrap.dedent(
        f"""
        import json, sys
        import agentloop.actions, agentloop.loops, agentloop.pipelines
        forbidden = {sorted(FORBIDDEN)!r}
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in forbidden)))
        """
    )

    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )

    assert json.loads(completed.stdout) == []

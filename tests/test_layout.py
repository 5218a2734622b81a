"""The limits the layout holds (issue 9): no import cycle, no re-export shim, small modules and
functions, and no module-global registry or store standing in for an argument.

Each check reads the source with ``ast``: nothing is imported, so a failure names the file and
line to change.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agentloop", "actions", "loops", "pipelines", "orchestration")
#: Project code whose module size is limited (tests and benchmarks included).
SIZED = (*PACKAGES, "bench", "tests")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def python_files(*folders: str) -> Iterator[Path]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path
    if "orchestration" in folders:
        yield ROOT / "celeryconfig.py"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The project modules ``path`` imports, at any depth of its code."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                stem = ".".join([*base, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{alias.name}" for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in python_files(*PACKAGES)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {target for target in imports_of(path) if target in modules and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_anywhere() -> None:
    graph = import_graph()
    # A package's __init__ importing its own submodules is its public front, not a cycle.
    for name in graph:
        graph[name] = {target for target in graph[name] if not target.startswith(f"{name}.")}
    assert cycles(graph) == []


@pytest.mark.parametrize("path", list(python_files(*SIZED)), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_the_line_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, (
        f"{path.relative_to(ROOT)} has {lines} lines: split it by responsibility"
    )


def test_no_function_in_orchestration_is_over_the_line_limit() -> None:
    long = []
    for path in python_files("orchestration"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert long == []


def test_no_module_is_a_re_export_shim() -> None:
    """No module-level ``__getattr__`` outside a package front (``__init__.py``, where it loads a
    public name of ``__all__`` lazily), and no module outside a package front whose whole body is
    imports."""
    shims = []
    for path in python_files(*PACKAGES):
        tree = ast.parse(path.read_text())
        body = [
            node
            for node in tree.body
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        ]
        getattr_hook = any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__" for node in body)
        if getattr_hook and path.name != "__init__.py":
            shims.append(f"{path.relative_to(ROOT)}: module __getattr__")
        only_imports = body and all(
            isinstance(node, ast.Import | ast.ImportFrom)
            or (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets))
            for node in body
        )
        if only_imports and path.name != "__init__.py":
            shims.append(f"{path.relative_to(ROOT)}: only re-exports")
    assert shims == []


GLOBAL_STATE_CALLS = frozenset({"RunnableRegistry", "open_store", "InMemoryRunStore", "SqlRunStore"})


def test_no_module_global_registry_or_store() -> None:
    """A registry or a run store is an argument (``create_app(registry=..., store=...)``), never
    a module global that a test has to swap out."""
    found = []
    for path in python_files(*PACKAGES):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Global):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} global {', '.join(node.names)}")
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Call):
                func = value.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in GLOBAL_STATE_CALLS:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} module-level {called}()")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Global):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} global {', '.join(node.names)}")
    assert sorted(set(found)) == []


def test_the_architecture_document_names_every_module_once() -> None:
    """``docs/architecture.md`` names each module of the packages with its job (package fronts
    and the example agent's own modules aside)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing, repeated = [], []
    for path in python_files(*PACKAGES):
        relative = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py" and relative != "agentloop/__init__.py":
            continue
        if relative.startswith("agentloop/examples/"):
            continue
        count = text.count(f"- `{relative}`:")
        if count == 0:
            missing.append(relative)
        elif count > 1:
            repeated.append(relative)
    assert (missing, repeated) == ([], [])

"""The architecture the layout holds: no import cycle, no import up a layer (nor from a lower room
of ``orchestration`` to a higher one), no re-export shim, no module-global registry or store, and a
document that names every module. Sizes are not checked: a module is split when it holds two
responsibilities, never to meet a number.

Modules are named as installed (``actions/base.py`` is ``agentloop.actions.base``). Each check
reads the source with ``ast``: nothing is imported, so a failure names the file and line to change.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Layers, lowest first: a module may import its own layer and those below, never one above.
LAYERS = ("agentloop.actions", "agentloop.loops", "agentloop.pipelines", "agentloop.orchestration")
#: The rooms of ``orchestration``, lowest first, by rank: a room imports rooms of its rank or below.
ROOMS = {
    "wire": 0,
    "redaction": 1,
    "errors": 0,
    "interruptions": 0,
    "providers": 0,
    "fairness": 1,
    "settings": 2,
    "registry": 2,
    "metrics": 2,
    "tracing": 3,
    "store": 3,
    "llm": 4,
    "packing": 4,
    "graph": 4,
    "runtime": 5,
    "integrations": 5,
    "client": 5,
    "replay": 5,
    "forks": 5,
    "celery_adapter": 6,
    "evals": 6,
    "mcp": 7,
    "testing": 7,
    "web": 7,
    "cli": 8,
}


def python_files() -> Iterator[Path]:
    """Every module of the installed package, each a real file under ``agentloop/``."""
    for path in sorted((ROOT / "agentloop").rglob("*.py")):
        if "migrations" not in path.parts:
            yield path


@functools.cache
def syntax_tree(path: Path) -> ast.Module:
    """``path`` parsed, once for the module's tests (they only read the trees)."""
    return ast.parse(path.read_text())


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> dict[str, int]:
    """The modules ``path`` imports, at any depth of its code, with the line of each."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(syntax_tree(path)):
        if isinstance(node, ast.Import):
            found.update({alias.name: node.lineno for alias in node.names})
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                stem = ".".join([*base, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            found.setdefault(stem, node.lineno)
            found.update({f"{stem}.{alias.name}": node.lineno for alias in node.names})
    return found


MODULES = {module_name(path): path for path in python_files()}


def import_graph() -> dict[str, set[str]]:
    return {
        name: {target for target in imports_of(path) if target in MODULES and target != name}
        for name, path in MODULES.items()
    }


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


def layer_of(module: str) -> int:
    """0-3 for the core's layers and orchestration; 4 for the front, the kit's front, the examples,
    the deployed app and the Celery settings module, which sit on top."""
    for rank, layer in enumerate(LAYERS):
        if module == layer or module.startswith(f"{layer}."):
            return rank
    return len(LAYERS)


def room_of(module: str) -> str | None:
    prefix = "agentloop.orchestration."
    return module.removeprefix(prefix).split(".")[0] if module.startswith(prefix) else None


def upward_imports(graph: dict[str, set[str]], lines: dict[str, dict[str, int]]) -> list[str]:
    found = []
    for module, targets in graph.items():
        for target in sorted(targets):
            where = f"{module}:{lines[module][target]} imports {target}"
            if layer_of(target) > layer_of(module):
                found.append(f"{where} (a layer up)")
                continue
            room, other = room_of(module), room_of(target)
            if room and other and room != other and ROOMS[other] > ROOMS[room]:
                found.append(f"{where} (room {other} is above {room})")
    return found


def test_the_upward_import_check_finds_one() -> None:
    graph = {
        "agentloop.loops.base": {"agentloop.pipelines.pipeline"},
        "agentloop.orchestration.settings": {"agentloop.orchestration.celery_adapter.schedule"},
        "agentloop.orchestration.celery_adapter.tasks": {"agentloop.orchestration.store.sql"},
        "agentloop.actions.base": {"agentloop"},
    }
    lines = {name: dict.fromkeys(targets, 1) for name, targets in graph.items()}

    assert upward_imports(graph, lines) == [
        "agentloop.loops.base:1 imports agentloop.pipelines.pipeline (a layer up)",
        "agentloop.orchestration.settings:1 imports agentloop.orchestration.celery_adapter.schedule"
        " (room celery_adapter is above settings)",
        "agentloop.actions.base:1 imports agentloop (a layer up)",
    ]


def test_every_room_of_orchestration_has_a_rank() -> None:
    rooms = {room_of(name) for name in MODULES} - {None, ""}
    assert sorted(rooms - set(ROOMS)) == [] and sorted(set(ROOMS) - rooms) == []


def test_no_import_runs_up_a_layer_or_a_room() -> None:
    lines = {name: imports_of(path) for name, path in MODULES.items()}
    assert upward_imports(import_graph(), lines) == []


def test_no_module_is_a_re_export_shim() -> None:
    """No module-level ``__getattr__`` outside a package front (``__init__.py``, where it loads a
    public name of ``__all__`` lazily), and no module outside a package front whose whole body is
    imports."""
    shims = []
    for path in python_files():
        tree = syntax_tree(path)
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
    for path in python_files():
        for node in syntax_tree(path).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Call):
                func = value.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in GLOBAL_STATE_CALLS:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} module-level {called}()")
        for node in ast.walk(syntax_tree(path)):
            if isinstance(node, ast.Global):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} global {', '.join(node.names)}")
    assert sorted(set(found)) == []


def test_the_architecture_document_names_every_module_once() -> None:
    """``docs/architecture.md`` names each module of the packages with its job (package fronts
    and the example agent's own modules aside)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing, repeated = [], []
    for path in python_files():
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


@pytest.mark.parametrize("name", ["actions", "loops", "pipelines", "orchestration", "agentloop.celeryconfig"])
def test_no_module_imports_a_design_folder_by_its_top_level_name(name: str) -> None:
    """Installed, ``actions`` is ``agentloop.actions``: a top-level ``import actions`` would find a
    user's own ``actions.py`` instead, or, from the checkout, load the module a second time."""
    found = [
        f"{module}:{line} imports {target}"
        for module, path in MODULES.items()
        for target, line in imports_of(path).items()
        if target.split(".")[0] == name
    ]
    assert found == []


def test_every_import_is_absolute() -> None:
    """``agentloop.orchestration.llm.openai`` and ``.anthropic`` are named like the SDKs they wrap:
    with absolute imports only, ``import openai`` is always the SDK (a relative ``from . import
    openai`` in ``llm/`` would be the subpackage)."""
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in python_files()
        for node in ast.walk(syntax_tree(path))
        if isinstance(node, ast.ImportFrom) and node.level
    ]
    assert found == []

"""The public surface: each package's ``__all__``, derived from the package itself, and what gets installed.

A package's ``__all__`` must list exactly the public names its ``__init__``
binds: the names it imports from the project's own modules to pass them on
(under ``TYPE_CHECKING`` too, for names loaded on first access; a name the
``__init__`` itself uses is its own business) and the functions, classes and
values it defines. Nothing is retyped here: adding a name to a package's front
means importing it there and listing it, and this test says when the two
disagree.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import inspect
import os
import re
import subprocess
import sys
import warnings
from functools import cache
from pathlib import Path

import pytest
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[1]
#: What the wheel installs at the top level: one import package (the design's top-level folders are
#: its subpackages); ``bench/`` and ``tests/`` are not installed.
INSTALLED_TOP_LEVEL = {"agentloop"}
#: Packages whose front a user imports: each must declare ``__all__``.
FRONTS = {"agentloop", "agentloop.actions", "agentloop.loops", "agentloop.pipelines"}
#: What ``import agentloop`` must not pull in: the infrastructure behind the lazily loaded names.
HEAVY = (
    "celery",
    "kombu",
    "sqlalchemy",
    "alembic",
    "pydantic_settings",
    "openai",
    "anthropic",
    "redis",
    "pydantic_ai",
)
#: The one home of the core's errors and the one home of the infrastructure's.
ERROR_MODULES = ("agentloop.actions.errors", "agentloop.orchestration.errors")


@cache
def _distribution() -> Distribution:
    """What setuptools installs, as it reads ``pyproject.toml`` (packages and top-level modules)."""
    with contextlib.chdir(ROOT), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return apply_configuration(Distribution(), ROOT / "pyproject.toml")


def _project_roots() -> set[str]:
    dist = _distribution()
    return {name.split(".")[0] for name in dist.packages} | set(dist.py_modules or ()) | {"bench"}


def _init_path(package: str) -> Path:
    return ROOT.joinpath(*package.split("."), "__init__.py")


def _declares_all(package: str) -> bool:
    tree = ast.parse(_init_path(package).read_text(encoding="utf-8"))
    return any(
        isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
        for node in tree.body
    )


def _packages_with_all() -> list[str]:
    packages = [*_distribution().packages, "bench"]
    return sorted(p for p in packages if _init_path(p).is_file() and _declares_all(p))


def _is_type_checking(node: ast.If) -> bool:
    return ast.unparse(node.test) in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


@cache
def _bound(package: str) -> dict[str, tuple[str, str]]:
    """Public name -> (module, name there) for what ``package``'s ``__init__`` imports or defines."""
    roots = _project_roots()
    tree = ast.parse(_init_path(package).read_text(encoding="utf-8"))
    statements = [*tree.body]
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node):
            statements += node.body
    used = {
        node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    bound: dict[str, tuple[str, str]] = {}
    for node in statements:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in roots:
                for alias in node.names:
                    name = alias.asname or alias.name
                    if name not in used:  # imported to be passed on, not to be used here
                        bound[name] = (node.module, alias.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound[node.name] = (package, node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id != "__all__":
                    bound[target.id] = (package, target.id)
    return {name: origin for name, origin in bound.items() if not name.startswith("_")}


PACKAGES = _packages_with_all()


def test_every_front_declares_all() -> None:
    assert set(PACKAGES) >= FRONTS


@pytest.mark.parametrize("package", PACKAGES)
def test_a_packages_all_lists_exactly_the_public_names_its_init_binds(package: str) -> None:
    names = importlib.import_module(package).__all__

    assert len(names) == len(set(names)), "a name is listed twice"
    assert sorted(set(names) - set(_bound(package))) == [], "listed but neither imported nor defined"
    assert sorted(set(_bound(package)) - set(names)) == [], "imported or defined but not listed"


@pytest.mark.parametrize("package", PACKAGES)
def test_a_packages_all_is_sorted(package: str) -> None:
    names = list(importlib.import_module(package).__all__)

    assert names == sorted(names)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_is_the_object_it_is_imported_from(package: str) -> None:
    module = importlib.import_module(package)
    for name, (source, original) in _bound(package).items():
        assert getattr(module, name) is getattr(importlib.import_module(source), original), name


@pytest.mark.parametrize("package", PACKAGES)
def test_star_import_gives_exactly_all(package: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)

    assert set(namespace) - {"__builtins__"} == set(importlib.import_module(package).__all__)


# --------------------------------------------------------------------------- the agentloop front


def test_agentloop_offers_every_name_of_the_core_packages() -> None:
    import agentloop
    from agentloop import actions, loops, pipelines

    core = {*actions.__all__, *loops.__all__, *pipelines.__all__}

    assert sorted(core - set(agentloop.__all__)) == []


def test_importing_agentloop_loads_no_infrastructure() -> None:
    code = f"import sys, agentloop; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()

    assert loaded == "[]"


def _type_checking_imports(package: str) -> dict[str, str]:
    """Name -> module of what ``package``'s ``__init__`` imports under ``if TYPE_CHECKING:``."""
    found: dict[str, str] = {}
    for node in ast.parse(_init_path(package).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    found.update({alias.asname or alias.name: statement.module for alias in statement.names})
    return found


def test_the_lazy_table_and_the_type_checking_imports_name_the_same_modules() -> None:
    """One table says which names load on first use and from where; the imports that give them
    their types must say the same, name for name and module for module."""
    import agentloop

    assert _type_checking_imports("agentloop") == agentloop._LAZY


def test_a_lazily_loaded_name_is_not_imported_at_once_too() -> None:
    import agentloop

    eager = {
        alias.asname or alias.name
        for node in ast.parse(_init_path("agentloop").read_text(encoding="utf-8")).body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }

    assert sorted(eager & set(agentloop._LAZY)) == []


def test_importing_agentloop_binds_every_name_but_the_lazy_ones() -> None:
    """Every error, and every name whose module is light, is there as soon as agentloop is imported."""
    code = "import agentloop; print(sorted(set(agentloop.__all__) - set(vars(agentloop))))"
    missing = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()

    import agentloop

    assert missing == repr(sorted(agentloop._LAZY))


def _lazy_modules() -> list[str]:
    import agentloop

    return sorted(set(agentloop._LAZY.values()))


@pytest.mark.parametrize("module", _lazy_modules())
def test_a_name_loads_lazily_only_when_its_module_is_heavy(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()

    assert loaded != "[]", f"{module} imports nothing heavy: import its names at once"


def _defining_module(package: str, name: str) -> Path:
    """The file that defines ``name``, following the from-imports of the packages in between."""
    module, original = _bound(package)[name]
    while (
        _init_path(module).is_file() and original in _bound(module) and _bound(module)[original][0] != module
    ):
        module, original = _bound(module)[original]
    path = _init_path(module)
    return path if path.is_file() else ROOT.joinpath(*module.split(".")).with_suffix(".py")


def _alias_is_documented(path: Path, name: str) -> bool:
    """A module-level alias is documented by a ``#:`` comment above it or a string right after it."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = source.splitlines()
    for index, node in enumerate(tree.body):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(getattr(target, "id", None) == name for target in targets):
            after = tree.body[index + 1] if index + 1 < len(tree.body) else None
            comment = node.lineno >= 2 and lines[node.lineno - 2].lstrip().startswith("#:")
            string = isinstance(after, ast.Expr) and isinstance(getattr(after, "value", None), ast.Constant)
            return comment or string
    return False


def _has_docstring(value: object) -> bool:
    if isinstance(value, type):
        doc = vars(value).get("__doc__")
        # a dataclass without a docstring gets its signature as __doc__: that says nothing
        return bool(doc and doc.strip()) and not doc.startswith(f"{value.__name__}(")
    return bool(inspect.getdoc(value))


def test_every_agentloop_name_is_documented() -> None:
    import agentloop

    undocumented = []
    for name in agentloop.__all__:
        value = getattr(agentloop, name)
        if inspect.isclass(value) or inspect.isroutine(value):
            documented = _has_docstring(value)
        else:  # a type alias: documented where it is defined
            documented = _alias_is_documented(_defining_module("agentloop", name), name)
        if not documented:
            undocumented.append(name)

    assert undocumented == []


_TREE_LINE = re.compile(
    r"^    (?P<indent>(?:│   |    )*)(?P<branch>├── |└── )?(?P<name>[A-Z]\w*Error)"
    r"(?:\s+\[(?P<builtins>[^\]]*)\])?(?:\s|$)"
)


def _drawn_tree() -> dict[str, tuple[str | None, set[str]]]:
    """Error name -> (parent drawn above it, builtin bases in brackets), read from agentloop's docstring."""
    import agentloop

    tree: dict[str, tuple[str | None, set[str]]] = {}
    stack: list[str] = []
    for line in (agentloop.__doc__ or "").splitlines():
        match = _TREE_LINE.match(line)
        if match is None:
            continue
        depth = len(match["indent"]) // 4 + (1 if match["branch"] else 0)
        del stack[depth:]
        builtins = {part.strip() for part in (match["builtins"] or "").split(",") if part.strip()}
        tree[match["name"]] = (stack[-1] if stack else None, builtins)
        stack.append(match["name"])
    return tree


def test_the_error_tree_drawn_in_agentloops_docstring_is_the_real_hierarchy() -> None:
    import agentloop

    exported = {
        name
        for name in agentloop.__all__
        if isinstance(getattr(agentloop, name), type) and issubclass(getattr(agentloop, name), BaseException)
    }
    drawn = _drawn_tree()

    assert set(drawn) == exported
    for name, (parent, brackets) in drawn.items():
        cls = getattr(agentloop, name)
        assert issubclass(cls, agentloop.AgentLoopError), f"{name} is outside the one root"
        ours = [base.__name__ for base in cls.__bases__ if issubclass(base, agentloop.AgentLoopError)]
        others = {base.__name__ for base in cls.__bases__ if not issubclass(base, agentloop.AgentLoopError)}
        assert ours == ([parent] if parent else []), name
        assert brackets == (others - {"Exception"}), name


def test_every_error_is_defined_in_one_of_the_two_errors_modules() -> None:
    """The core's errors live in ``actions/errors.py``, the infrastructure's in ``orchestration/errors.py``
    (a test kit's own errors aside: they are not exported)."""
    import agentloop

    errors = [getattr(agentloop, name) for name in agentloop.__all__]
    elsewhere = sorted(
        f"{cls.__name__} ({cls.__module__})"
        for cls in errors
        if isinstance(cls, type) and issubclass(cls, BaseException) and cls.__module__ not in ERROR_MODULES
    )

    assert elsewhere == []


def _framework_classes() -> dict[str, set[str]]:
    """Class name -> the names of its bases, for every class the framework defines (not its test kit)."""
    bases: dict[str, set[str]] = {}
    for top in ("actions", "loops", "pipelines", "orchestration"):
        for path in (ROOT / top).rglob("*.py"):
            if "testing" in path.relative_to(ROOT).parts:
                continue  # the test kit's own servers and doubles are not the framework's errors
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    names = {getattr(base, "id", None) or getattr(base, "attr", None) for base in node.bases}
                    bases.setdefault(node.name, set()).update(n for n in names if n)
    return bases


def _derived(bases: dict[str, set[str]], roots: set[str]) -> set[str]:
    found = set(roots)
    while grown := {name for name, parents in bases.items() if parents & found} - found:
        found |= grown
    return found - roots


def test_every_error_the_framework_defines_is_exported_from_agentloop() -> None:
    import agentloop

    errors = _derived(_framework_classes(), {"AgentLoopError"})

    assert sorted(name for name in errors - set(agentloop.__all__) if not name.startswith("_")) == []


def test_every_exception_the_framework_defines_has_the_one_root() -> None:
    builtin = {name for name, value in vars(builtins).items() if isinstance(value, type)}
    exceptions = {name for name in builtin if issubclass(getattr(builtins, name), BaseException)}
    classes = _framework_classes()

    outside = _derived(classes, exceptions) - _derived(classes, {"AgentLoopError"}) - {"AgentLoopError"}
    # RunPaused is no error but a control-flow signal (a BaseException, as asyncio.CancelledError):
    # a paused step's ``except Exception`` must not take it for a failure (actions/human.py).
    outside -= {"RunPaused"}

    assert sorted(outside) == []


# --------------------------------------------------------------------------- what gets installed


def test_the_testing_front_lists_each_name_once_sorted_and_bound() -> None:
    import agentloop.testing

    names = list(agentloop.testing.__all__)

    assert names == sorted(set(names))
    assert all(getattr(agentloop.testing, name, None) is not None for name in names)
    assert agentloop.testing.pytest_plugins == ["agentloop.orchestration.testing.plugin"]


def test_the_distribution_installs_one_import_package() -> None:
    dist = _distribution()
    top_level = {name.split(".")[0] for name in dist.packages} | {
        m.split(".")[0] for m in dist.py_modules or ()
    }

    assert top_level == INSTALLED_TOP_LEVEL


def test_the_design_folders_are_subpackages_of_agentloop() -> None:
    packages = set(_distribution().packages)

    assert {
        "agentloop.actions",
        "agentloop.loops",
        "agentloop.pipelines",
        "agentloop.orchestration",
    } <= packages
    assert not any(path.is_symlink() for path in (ROOT / "agentloop").rglob("*"))


def test_every_folder_of_python_code_in_an_installed_package_is_installed() -> None:
    dist = _distribution()
    missing = []
    for top in {name.split(".")[0] for name in dist.packages}:
        folders = [Path(where) for where, _, _ in os.walk(ROOT / top)]
        for folder in folders:
            if folder.name == "__pycache__":
                continue
            dotted = ".".join(folder.relative_to(ROOT).parts)
            if any(folder.glob("*.py")) and dotted not in dist.packages:
                missing.append(dotted)

    assert sorted(missing) == []

"""The public API's reference: one mkdocstrings entry per name of ``agentloop.__all__`` (and of
``agentloop.testing.__all__``), grouped by kind; a name without a docstring fails the build.

The docstrings are read by griffe, as mkdocstrings reads them, so what is checked is what renders.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import griffe
from mkdocs.exceptions import PluginError

#: The headings of the groups, in page order.
KINDS = ("Errors", "Classes", "Functions", "Types and values")


def kind_of(value: Any) -> str:
    if inspect.isclass(value):
        return "Errors" if issubclass(value, BaseException) else "Classes"
    if (
        inspect.isfunction(value)
        or inspect.isbuiltin(value)
        or (callable(value) and hasattr(value, "__wrapped__"))
    ):
        return "Functions"
    return "Types and values"


def undocumented(package: str, names: list[str]) -> list[str]:
    """The names of ``package`` whose object has no docstring of its own, as griffe reads it."""
    loader = (
        griffe.GriffeLoader()
    )  # on sys.path, as mkdocstrings finds it (the hook puts the repository there)
    module = loader.load(package)
    loader.resolve_aliases(implicit=False, external=None)
    missing = []
    for name in names:
        try:
            target = module[name]
            docstring = target.docstring
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            missing.append(f"{name} (not found by griffe)")
            continue
        if docstring is None or not docstring.value.strip():
            missing.append(name)
    return missing


def reference(package: str) -> str:
    """The Markdown of ``package``'s public names: a section per kind, a ``:::`` entry per name."""
    module = importlib.import_module(package)
    names: list[str] = list(module.__all__)
    missing = undocumented(package, names)
    if missing:
        raise PluginError(f"public names of {package} without a docstring: {', '.join(missing)}")
    groups: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for name in names:
        groups[kind_of(getattr(module, name))].append(name)
    lines = []
    for kind, members in groups.items():
        if members:
            lines += [f"## {kind}", ""]
            lines += [f"::: {package}.{name}\n" for name in members]
    return "\n".join(lines)


def public_api() -> str:
    return reference("agentloop")


def testing_api() -> str:
    return reference("agentloop.testing")

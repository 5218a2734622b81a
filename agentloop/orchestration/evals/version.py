"""The code version an evaluation keeps: what would tell two evaluations' code apart.

- ``agentloop``: the installed package's version;
- ``git``: ``git describe --always --dirty --tags`` in the repository holding the runnable's source
  (``None`` outside one, or without git): a commit, and ``-dirty`` for uncommitted changes;
- ``source_sha256``: a hash of every ``.py`` file of the runnable's top-level package (or of its
  module, when that is a top-level module), names and bytes, so a prompt edited in a helper module of
  the application changes it even where there is no git; ``source_files`` says how many were hashed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["code_version", "source_digest"]

#: Folders never hashed: caches and virtualenvs a package folder may hold.
_SKIPPED = frozenset({"__pycache__", ".venv", "venv", ".git", ".mypy_cache", ".ruff_cache", "node_modules"})


def _top_level_path(module_name: str) -> Path | None:
    """The folder of ``module_name``'s top-level package, or the file of a top-level module."""
    top = sys.modules.get(module_name.split(".")[0])
    if top is None:
        return None
    locations = list(getattr(top, "__path__", ()))
    if locations:
        return Path(locations[0])
    file = getattr(top, "__file__", None)
    return Path(file) if file else None


def source_digest(module_name: str) -> dict[str, Any]:
    """``{"source_root", "source_sha256", "source_files"}`` of ``module_name``'s top-level package."""
    root = _top_level_path(module_name)
    digest = hashlib.sha256()
    files: list[Path] = []
    if root is not None and root.is_file():
        files = [root]
    elif root is not None:
        seen: set[str] = set()  # links are followed (agentloop's own folders are links): each folder once
        for folder, subfolders, names in os.walk(root, followlinks=True):
            real = os.path.realpath(folder)
            if real in seen:
                subfolders[:] = []
                continue
            seen.add(real)
            subfolders[:] = sorted(name for name in subfolders if name not in _SKIPPED)
            files += [Path(folder) / name for name in sorted(names) if name.endswith(".py")]
    for file in files:
        relative = file.name if root is None or root.is_file() else file.relative_to(root).as_posix()
        digest.update(relative.encode() + b"\0" + file.read_bytes() + b"\0")
    return {
        "source_root": module_name.split(".")[0],
        "source_sha256": digest.hexdigest() if files else None,
        "source_files": len(files),
    }


def _git_describe(folder: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def code_version(runnable: type) -> dict[str, Any]:
    """The code version of ``runnable`` (see the module doc)."""
    try:
        package = importlib.metadata.version("agentloop")
    except importlib.metadata.PackageNotFoundError:
        package = None
    module = sys.modules.get(runnable.__module__)
    file = getattr(module, "__file__", None)
    git = _git_describe(Path(file).resolve().parent) if file else None
    return {"agentloop": package, "git": git, **source_digest(runnable.__module__)}

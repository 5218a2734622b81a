"""The evaluation tests' home: embedded defaults in a fresh folder, and the test workflows registered."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.newcomer import MACHINE_SETTINGS


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``AGENTLOOP_HOME`` and working folder, none of the machine's settings, and
    ``AGENTLOOP_IMPORTS=workflows.eval``."""
    for name in MACHINE_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTLOOP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.eval")
    monkeypatch.chdir(tmp_path)
    return tmp_path

"""The CLI tests' home: embedded defaults in a fresh folder (no servers, no key, a SQLite file of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.newcomer import MACHINE_SETTINGS


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``AGENTLOOP_HOME`` and working folder, with none of the machine's settings."""
    for name in MACHINE_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTLOOP_HOME", str(tmp_path / ".agentloop"))
    monkeypatch.chdir(tmp_path)
    return tmp_path

"""The evaluation tests' home: the shared ``home`` (``tests/conftest.py``) with the test workflows
registered."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def eval_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``home``, and ``AGENTLOOP_IMPORTS=workflows.eval``."""
    monkeypatch.setenv("AGENTLOOP_IMPORTS", "workflows.eval")
    return home

"""What the canvas tests (``test_canvas_shapes.py``, ``test_canvas_packs.py``) compile with: a
fake task, which has what the compiler uses of one and raises the canvas it is replaced with."""

from __future__ import annotations

from celery import Celery, Signature


class Replaced(Exception):
    """What the fake task's ``replace`` raises: the canvas it was replaced with."""

    def __init__(self, canvas: Signature) -> None:
        super().__init__("replaced")
        self.canvas = canvas


class FakeTask:
    """What the compiler uses of a task: its app, its name (in errors), and ``replace``."""

    name = "agentloop.run"

    def __init__(self, app: Celery) -> None:
        self.app = app

    def replace(self, canvas: Signature) -> Replaced:
        return Replaced(canvas)

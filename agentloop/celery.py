"""The deployed Celery app: ``celery -A agentloop worker|beat|flower`` finds ``app`` here.

Configured from ``agentloop.celeryconfig`` (the environment) by
:func:`agentloop.orchestration.celery_adapter.app.create_app`. Library code and tests build their own
app with the factory instead of importing this module.
"""

from __future__ import annotations

from agentloop.orchestration.celery_adapter.app import create_app

__all__ = ["app"]

#: The app Celery's command line discovers as ``agentloop.celery:app``.
app = create_app()

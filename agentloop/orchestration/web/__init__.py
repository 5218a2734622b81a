"""``agentloop serve``: runs over HTTP (GraphQL, plain JSON, Server-Sent Events) and the run viewer.

An adapter beside the Celery app: it imports ``orchestration`` and the core
never imports it. Needs the ``http`` extra (``pip install 'agentloop[http]'``:
Starlette, uvicorn, Strawberry). :func:`create_web_app` builds the ASGI app for
a Celery app; ``agentloop serve`` runs it with uvicorn.
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401
    import strawberry  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on what is installed
    raise ImportError(
        f"agentloop serve needs the http extra ({missing.name} is missing): pip install 'agentloop[http]'"
    ) from missing

from agentloop.orchestration.web.app import create_web_app

__all__ = ["create_web_app"]

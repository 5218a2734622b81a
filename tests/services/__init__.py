"""Private servers for integration tests: Redis, PostgreSQL, RabbitMQ, an OpenAI-wire server,
and real worker processes configured like production."""

import os


def on_ci() -> bool:
    """Whether ``CI`` says integration tests must run: a server they need missing is then an
    error, never a skip. True for ``1``, ``true``, ``yes`` and ``on`` (any case)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes", "on"}

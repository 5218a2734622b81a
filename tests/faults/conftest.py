"""The fault tests' rig: one :class:`~tests.faults.rig.FaultRig` per test module (a real prefork
worker, a private Redis and PostgreSQL database behind a proxy, the OpenAI-protocol server)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.services.postgres import PostgresUnavailableError, skip_or_fail
from tests.services.redis_server import ServiceUnavailable

from .rig import FaultRig


@pytest.fixture(scope="module")
def fault_rig() -> Iterator[FaultRig]:
    """The servers, the worker and the clients, opened once for the module."""
    with ExitStack() as stack:
        try:
            opened = stack.enter_context(FaultRig.open())
        except PostgresUnavailableError as unavailable:
            skip_or_fail(str(unavailable))
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        yield opened

"""What a broker URL is, decided once: the one description every place asks.

``BROKER_URL`` names a transport by its scheme, spelled several ways (``amqp``, ``amqps``,
``pyamqp``, ``pyamqp+ssl``; ``redis``, ``rediss``; ``memory``). :class:`Broker` reads the URL once
and answers what the settings, the Celery configuration, beat batches, the step cache (whose
``AGENTLOOP_CACHE_URL`` names its transport the same way) and the CLI ask of it: which transport;
whether it is RabbitMQ (quorum queues, publisher confirms, whole-second countdowns), Redis, or this
process's memory (reachable by nothing outside it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["Broker", "Transport"]

#: The transports agentloop knows; any other scheme is ``"other"`` (Celery may still run on it).
Transport = Literal["amqp", "redis", "memory", "other"]

_TRANSPORTS: dict[str, Transport] = {
    "amqp": "amqp",
    "amqps": "amqp",
    "pyamqp": "amqp",
    "redis": "redis",
    "rediss": "redis",
    "memory": "memory",
}


@dataclass(frozen=True, slots=True)
class Broker:
    """A broker URL and the transport its scheme names."""

    url: str
    transport: Transport

    @classmethod
    def of(cls, url: str) -> Broker:
        """The broker ``url`` names: its scheme before ``://`` (and before a ``+``), case-blind."""
        scheme = url.split("://", 1)[0].lower().split("+")[0] if "://" in url else ""
        return cls(url=url, transport=_TRANSPORTS.get(scheme, "other"))

    @property
    def is_amqp(self) -> bool:
        """RabbitMQ (AMQP 0-9-1): quorum queues, publisher confirms, native delayed delivery."""
        return self.transport == "amqp"

    @property
    def is_redis(self) -> bool:
        """Redis (``redis://`` or ``rediss://``)."""
        return self.transport == "redis"

    @property
    def in_process(self) -> bool:
        """Celery's in-memory transport: only this process can reach its queues."""
        return self.transport == "memory"

    def countdown(self, seconds: float) -> float:
        """``seconds`` as a countdown this broker keeps: RabbitMQ's native delayed delivery
        counts whole seconds and refuses one under 1 s, so a fraction is rounded up there."""
        if self.is_amqp:
            return float(max(1, math.ceil(seconds)))
        return seconds

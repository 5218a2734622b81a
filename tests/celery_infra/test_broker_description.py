"""One description of the broker (``settings/broker.py``) that every place asks: the settings'
defaults, Celery's queues and confirms, beat batches' countdowns and the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentloop.orchestration.settings.broker import Broker

PACKAGE = Path(__file__).resolve().parents[2] / "agentloop"


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("amqp://guest:guest@127.0.0.1:5672//", "amqp"),
        ("AMQPS://host//", "amqp"),
        ("pyamqp://host//", "amqp"),
        ("pyamqp+ssl://host//", "amqp"),
        ("redis://127.0.0.1:6379/0", "redis"),
        ("rediss://host:6380/0", "redis"),
        ("memory://", "memory"),
        ("sqs://", "other"),
        ("not a url", "other"),
    ],
)
def test_a_broker_url_names_its_transport(url: str, transport: str) -> None:
    assert Broker.of(url).transport == transport


def test_only_rabbitmq_rounds_a_countdown_up_to_whole_seconds() -> None:
    assert Broker.of("amqp://h//").countdown(0.2) == 1.0
    assert Broker.of("amqp://h//").countdown(2.5) == 3.0
    assert Broker.of("redis://h/0").countdown(0.2) == 0.2
    assert Broker.of("memory://").countdown(0.2) == 0.2


def test_no_other_module_reads_a_broker_scheme() -> None:
    """A scheme spelled out (``"amqps"``, ``"pyamqp"``) or a ``startswith("memory://")`` outside
    ``settings/broker.py`` is a second place that decides what a broker is."""
    spelled = re.compile(r"""["'](?:amqps|pyamqp|rediss)["']|startswith\(["'](?:memory|amqp|redis)""")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "broker.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if spelled.search(line)
    ]
    assert found == []

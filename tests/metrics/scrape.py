"""Reading scrapes in the metrics tests: Prometheus' text format parsed by ``prometheus_client``,
samples summed over the processes that served them."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterable, Mapping
from contextlib import closing

from prometheus_client.parser import text_string_to_metric_families

Key = tuple[str, frozenset[tuple[str, str]]]


def samples(text: str) -> dict[Key, float]:
    """Every sample of a scrape by ``(name, labels)``."""
    found: dict[Key, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            found[key] = found.get(key, 0.0) + sample.value
    return found


def summed(scrapes: Iterable[Mapping[Key, float]]) -> dict[Key, float]:
    """The samples of several processes added up (their counters are each their own)."""
    total: dict[Key, float] = {}
    for scrape in scrapes:
        for key, value in scrape.items():
            total[key] = total.get(key, 0.0) + value
    return total


def value(found: Mapping[Key, float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when there are none)."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in found.items() if n == name and wanted <= set(have))


def names(found: Mapping[Key, float]) -> set[str]:
    return {name for name, _ in found}


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1 now."""
    for _ in range(50):
        with closing(socket.socket()) as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                held = socket.socket()
                sockets.append(held)
                held.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for held in sockets:
                held.close()
    raise RuntimeError(f"no {count} consecutive free ports")

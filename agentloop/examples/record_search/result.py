"""What a record search returns, and what the executor needs from a search backend."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentloop.examples.record_search.catalog import SearchableCategory


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchResult:
    """The records of the plan's last step (at most ``limit``) and how many matched in all.

    Each record is JSON: ``{"category", "id", "label", "fields": {...}}``.
    """

    category_id: str
    records: tuple[Mapping[str, Any], ...]
    found_count: int
    limit: int

    @property
    def is_truncated(self) -> bool:
        return self.found_count > len(self.records)

    def to_dict(self) -> dict[str, Any]:
        return {
            "category_id": self.category_id,
            "records": [dict(record) for record in self.records],
            "found_count": self.found_count,
            "is_truncated": self.is_truncated,
            "limit": self.limit,
        }


@runtime_checkable
class RecordSearchBackend(Protocol):
    """What ``context.record_search_service`` must provide."""

    @property
    def searchable_categories(self) -> tuple[SearchableCategory, ...]: ...

    def search(self, *, plan: Mapping[str, Any]) -> SearchResult:
        """Run a normal-form plan (see :mod:`agentloop.examples.record_search.plan`)."""
        ...

"""``RecordSearchService``: runs search plans over the record tables with SQLAlchemy 2.

Every query is built from SQLAlchemy expressions: column names come from the
catalog-to-table maps in :mod:`agentloop.examples.record_search.schema` (never from the
plan's text), and every value from a plan is a bound parameter. A plan is
validated against the catalog again before it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any, Self

from sqlalchemy import ColumnElement, Engine, Select, Table, func, select
from sqlalchemy.engine import RowMapping

from agentloop.examples.record_search.catalog import SEARCHABLE_CATEGORIES, SearchableCategory
from agentloop.examples.record_search.plan import step_categories, validate_plan
from agentloop.examples.record_search.result import SearchResult
from agentloop.examples.record_search.schema import CATEGORY_TABLES, ORDER_BY, RELATION_COLUMNS


class RecordSearchService:
    """Searches the records of a database made by :func:`~.sample_data.build_sample_database`.

    ``search(plan=...)`` runs the plan's steps in order: the first selects the
    rows of its category that pass its filters; each later step follows its
    relation from the rows selected so far and applies its own filters. The
    result is the last step's rows — at most the plan's ``limit``, sorted — and
    how many matched in all.
    """

    def __init__(self, *, engine: Engine, categories: Sequence[SearchableCategory] = SEARCHABLE_CATEGORIES):
        self.engine = engine
        self._categories = tuple(categories)
        _check_mapping(self._categories)

    @classmethod
    def create(
        cls, *, engine: Engine, categories: Sequence[SearchableCategory] = SEARCHABLE_CATEGORIES
    ) -> Self:
        return cls(engine=engine, categories=categories)

    @property
    def searchable_categories(self) -> tuple[SearchableCategory, ...]:
        return self._categories

    def build_query(self, *, plan: Mapping[str, Any]) -> tuple[Select[Any], SearchableCategory, int]:
        """The ids selected by ``plan``, its result category and its limit (``ValueError`` if invalid)."""
        normalized = validate_plan(plan, self._categories)
        if normalized is None:
            raise ValueError("the search plan is not allowed by the catalog")
        categories = step_categories(normalized, self._categories)
        ids: Select[Any] | None = None
        for index, (step, category) in enumerate(zip(normalized["steps"], categories, strict=True)):
            table = CATEGORY_TABLES[category.id]
            conditions = [
                _condition(table, category, item["field"], item["op"], item["value"])
                for item in step["filters"]
            ]
            if index > 0:
                assert ids is not None
                source = categories[index - 1]
                source_table = CATEGORY_TABLES[source.id]
                source_column, target_column = RELATION_COLUMNS[(source.id, step["follow"])]
                reached = select(source_table.c[source_column]).where(source_table.c.id.in_(ids))
                conditions.append(table.c[target_column].in_(reached))
            ids = select(table.c.id).where(*conditions)
        assert ids is not None
        return ids, categories[-1], int(normalized["limit"])

    def search(self, *, plan: Mapping[str, Any]) -> SearchResult:
        """Run ``plan`` (validated again here); ``ValueError`` when the catalog does not allow it."""
        ids, category, limit = self.build_query(plan=plan)
        table = CATEGORY_TABLES[category.id]
        order_column, descending = ORDER_BY.get(category.id, ("id", False))
        order = table.c[order_column].desc() if descending else table.c[order_column].asc()
        count_query = select(func.count()).select_from(ids.subquery())
        rows_query = select(table).where(table.c.id.in_(ids)).order_by(order, table.c.id).limit(limit)
        with self.engine.connect() as connection:
            found_count = int(connection.execute(count_query).scalar_one())
            rows = connection.execute(rows_query).mappings().all()
        return SearchResult(
            category_id=category.id,
            records=tuple(_record(category, row) for row in rows),
            found_count=found_count,
            limit=limit,
        )


def _condition(
    table: Table, category: SearchableCategory, field_name: str, op: str, value: Any
) -> ColumnElement[bool]:
    field = category.field(field_name)
    assert field is not None  # the plan was validated against this category
    column = table.c[field.name]
    if field.type == "date":
        value = date.fromisoformat(value)
    if field.type == "string":
        lowered = func.lower(column)
        if op == "contains":
            return lowered.contains(str(value).lower(), autoescape=True)
        return lowered == str(value).lower()
    comparisons: dict[str, ColumnElement[bool]] = {
        "eq": column == value,
        "gt": column > value,
        "lt": column < value,
        "gte": column >= value,
        "lte": column <= value,
    }
    return comparisons[op]


def _record(category: SearchableCategory, row: RowMapping) -> dict[str, Any]:
    fields = {name: _json_value(row[name]) for name in category.field_names}
    return {
        "category": category.id,
        "id": int(row["id"]),
        "label": str(row[category.label_field]),
        "fields": fields,
    }


def _json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, date) else value


def _check_mapping(categories: Sequence[SearchableCategory]) -> None:
    """Every category, field and relation of the catalog must exist in the tables."""
    for category in categories:
        table = CATEGORY_TABLES.get(category.id)
        if table is None:
            raise ValueError(f"category {category.id!r} has no table")
        missing = [name for name in (*category.field_names, category.label_field) if name not in table.c]
        if missing:
            raise ValueError(f"category {category.id!r}: no column for {missing}")
        for relation in category.relations:
            if (category.id, relation.name) not in RELATION_COLUMNS:
                raise ValueError(f"relation {category.id}.{relation.name} has no join")

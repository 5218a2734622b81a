"""The record-search tables, in their own ``MetaData`` (they never mix with the framework's).

``rs_companies`` <- ``rs_contacts`` (``company_id``), ``rs_companies`` <- ``rs_deals``
(``company_id``), ``rs_contacts`` <- ``rs_deals`` (``contact_id``). The maps below
tie the catalog to the tables: each category's table, and for each relation
the column it leaves from and the column it arrives at.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Column, Date, ForeignKey, Integer, MetaData, Numeric, String, Table

RECORD_SEARCH_METADATA = MetaData()

companies_table = Table(
    "rs_companies",
    RECORD_SEARCH_METADATA,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("name", String(200), nullable=False, index=True),
    Column("industry", String(50), nullable=False, index=True),
    Column("country", String(80), nullable=False, index=True),
    Column("city", String(80), nullable=False),
    Column("employee_count", Integer, nullable=False),
    Column("founded_year", Integer, nullable=False),
    Column("annual_revenue", Numeric(16, 2, asdecimal=False), nullable=False),
)

contacts_table = Table(
    "rs_contacts",
    RECORD_SEARCH_METADATA,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("company_id", Integer, ForeignKey("rs_companies.id"), nullable=False, index=True),
    Column("name", String(200), nullable=False, index=True),
    Column("email", String(200), nullable=False),
    Column("role", String(100), nullable=False),
    Column("city", String(80), nullable=False),
)

deals_table = Table(
    "rs_deals",
    RECORD_SEARCH_METADATA,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("company_id", Integer, ForeignKey("rs_companies.id"), nullable=False, index=True),
    Column("contact_id", Integer, ForeignKey("rs_contacts.id"), nullable=True, index=True),
    Column("title", String(200), nullable=False),
    Column("amount", Numeric(14, 2, asdecimal=False), nullable=False),
    Column("stage", String(20), nullable=False, index=True),
    Column("close_date", Date, nullable=False),
    Column("probability", Integer, nullable=False),
)

#: Category id -> its table.
CATEGORY_TABLES: Mapping[str, Table] = {
    "companies": companies_table,
    "contacts": contacts_table,
    "deals": deals_table,
}

#: (category id, relation name) -> (column of the source table, column of the target table):
#: following the relation from a set of source rows reaches the target rows whose target
#: column is among the source rows' source column.
RELATION_COLUMNS: Mapping[tuple[str, str], tuple[str, str]] = {
    ("companies", "contacts"): ("id", "company_id"),
    ("companies", "deals"): ("id", "company_id"),
    ("contacts", "company"): ("company_id", "id"),
    ("contacts", "deals"): ("id", "contact_id"),
    ("deals", "company"): ("company_id", "id"),
    ("deals", "contact"): ("contact_id", "id"),
}

#: Category id -> (column, descending) the listed records are sorted by (then by id).
ORDER_BY: Mapping[str, tuple[str, bool]] = {
    "companies": ("name", False),
    "contacts": ("name", False),
    "deals": ("amount", True),
}

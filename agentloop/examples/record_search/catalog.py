"""The searchable categories: what the planner may name and the executor may run.

The catalog is the one description of the record space that the model sees
(rendered into the plan instruction) and that the code re-validates every plan
against. A category has an id, a display name, typed fields, and relations to
other categories (a relation is followed from the previous step of a plan).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

FieldType = Literal["string", "integer", "number", "date"]

#: Filter operators, and the field types each applies to.
OPERATORS: Mapping[str, frozenset[str]] = {
    "eq": frozenset({"string", "integer", "number", "date"}),
    "contains": frozenset({"string"}),
    "gt": frozenset({"integer", "number", "date"}),
    "lt": frozenset({"integer", "number", "date"}),
    "gte": frozenset({"integer", "number", "date"}),
    "lte": frozenset({"integer", "number", "date"}),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class CategoryField:
    """One searchable field. ``values`` lists the allowed values of an enumerated field."""

    name: str
    type: FieldType
    description: str = ""
    values: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "type": self.type, "description": self.description}
        if self.values:
            data["values"] = list(self.values)
        return data


@dataclass(frozen=True, kw_only=True, slots=True)
class CategoryRelation:
    """A relation a plan may follow from this category to ``target`` (a category id)."""

    name: str
    target: str
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target, "description": self.description}


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchableCategory:
    """One category of records: id, display name, fields and relations."""

    id: str
    name: str
    singular_name: str
    description: str
    fields: tuple[CategoryField, ...]
    relations: tuple[CategoryRelation, ...] = ()
    #: The field that names a record in answers (e.g. a company's ``name``).
    label_field: str = "name"

    def count_phrase(self, count: int) -> str:
        """``"1 company"``, ``"12 companies"``."""
        return f"{count} {self.singular_name if count == 1 else self.name.lower()}"

    def field(self, name: str) -> CategoryField | None:
        return next((field for field in self.fields if field.name == name), None)

    def relation(self, name: str) -> CategoryRelation | None:
        return next((relation for relation in self.relations if relation.name == name), None)

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(field.name for field in self.fields)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "singular_name": self.singular_name,
            "description": self.description,
            "fields": [field.to_dict() for field in self.fields],
            "relations": [relation.to_dict() for relation in self.relations],
        }


def find_category(categories: Iterable[SearchableCategory], category_id: object) -> SearchableCategory | None:
    """The category with ``category_id``; ``None`` when there is none (or the id is not a string)."""
    if not isinstance(category_id, str):
        return None
    return next((category for category in categories if category.id == category_id), None)


def catalog_to_dicts(categories: Sequence[SearchableCategory]) -> list[dict[str, Any]]:
    """The catalog as JSON data (what the plan instruction shows the model)."""
    return [category.to_dict() for category in categories]


INDUSTRIES = (
    "Software",
    "Manufacturing",
    "Healthcare",
    "Finance",
    "Retail",
    "Logistics",
    "Energy",
    "Education",
)
COUNTRIES = (
    "Germany",
    "France",
    "United Kingdom",
    "United States",
    "Japan",
    "Netherlands",
    "Spain",
    "Sweden",
)
DEAL_STAGES = ("lead", "qualified", "proposal", "negotiation", "won", "lost")

COMPANIES = SearchableCategory(
    id="companies",
    name="Companies",
    singular_name="company",
    description="Organisations we do business with.",
    fields=(
        CategoryField(name="name", type="string", description="Company name"),
        CategoryField(name="industry", type="string", description="Industry", values=INDUSTRIES),
        CategoryField(
            name="country", type="string", description="Country of the head office", values=COUNTRIES
        ),
        CategoryField(name="city", type="string", description="City of the head office"),
        CategoryField(name="employee_count", type="integer", description="Number of employees"),
        CategoryField(name="founded_year", type="integer", description="Year the company was founded"),
        CategoryField(name="annual_revenue", type="number", description="Annual revenue in EUR"),
    ),
    relations=(
        CategoryRelation(name="contacts", target="contacts", description="People who work at the company"),
        CategoryRelation(name="deals", target="deals", description="Deals with the company"),
    ),
)

CONTACTS = SearchableCategory(
    id="contacts",
    name="Contacts",
    singular_name="contact",
    description="People at our client companies.",
    fields=(
        CategoryField(name="name", type="string", description="Full name"),
        CategoryField(name="email", type="string", description="E-mail address"),
        CategoryField(name="role", type="string", description="Job title, e.g. CTO or Head of Procurement"),
        CategoryField(name="city", type="string", description="City where the person works"),
    ),
    relations=(
        CategoryRelation(name="company", target="companies", description="The company the person works at"),
        CategoryRelation(name="deals", target="deals", description="Deals where the person is the contact"),
    ),
)

DEALS = SearchableCategory(
    id="deals",
    name="Deals",
    singular_name="deal",
    description="Sales opportunities, one company and one contact each.",
    fields=(
        CategoryField(name="title", type="string", description="Deal title"),
        CategoryField(name="amount", type="number", description="Deal value in EUR"),
        CategoryField(name="stage", type="string", description="Pipeline stage", values=DEAL_STAGES),
        CategoryField(
            name="close_date", type="date", description="Expected or actual close date (YYYY-MM-DD)"
        ),
        CategoryField(name="probability", type="integer", description="Win probability in percent"),
    ),
    relations=(
        CategoryRelation(name="company", target="companies", description="The company the deal is with"),
        CategoryRelation(name="contact", target="contacts", description="The contact person of the deal"),
    ),
    label_field="title",
)

#: The catalog the record-search agent works over, in display order.
SEARCHABLE_CATEGORIES: tuple[SearchableCategory, ...] = (COMPANIES, CONTACTS, DEALS)

"""A realistic, deterministic sample database for the record-search agent.

:func:`build_sample_database` creates the ``rs_*`` tables in any SQLAlchemy
engine and fills them with the same records every time (a fixed seed): 72
companies in eight industries and eight countries, two to four contacts each
with their roles, and one to three deals each with amounts, stages and close
dates — a few hundred records with relations. It is idempotent (rows are
inserted with ``ON CONFLICT DO NOTHING``), so several workers may call it at
once. :func:`load_tools` writes the agent's tool schemas into a tool store.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Table, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError, ProgrammingError

from agentloop.examples.record_search.catalog import COUNTRIES, DEAL_STAGES, INDUSTRIES
from agentloop.examples.record_search.schema import (
    RECORD_SEARCH_METADATA,
    companies_table,
    contacts_table,
    deals_table,
)
from agentloop.examples.record_search.tools import TOOL_PAYLOADS

SEED = 20240917
GENERATED_COMPANIES = 68

_COUNTRY_INFO: Mapping[str, dict[str, Any]] = {
    "Germany": {
        "cities": ("Berlin", "Munich", "Hamburg", "Cologne", "Stuttgart"),
        "suffix": "GmbH",
        "tld": "de",
        "first": ("Lukas", "Anna", "Jonas", "Lea", "Felix", "Marie", "Paul", "Sophie", "Max", "Laura"),
        "last": ("Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Wagner", "Becker", "Hoffmann"),
    },
    "France": {
        "cities": ("Paris", "Lyon", "Toulouse", "Nantes", "Lille"),
        "suffix": "SAS",
        "tld": "fr",
        "first": ("Louis", "Camille", "Hugo", "Chloé", "Jules", "Manon", "Arthur", "Inès", "Léa", "Nathan"),
        "last": ("Martin", "Bernard", "Dubois", "Durand", "Lefebvre", "Moreau", "Laurent", "Girard"),
    },
    "United Kingdom": {
        "cities": ("London", "Manchester", "Edinburgh", "Bristol", "Leeds"),
        "suffix": "Ltd",
        "tld": "co.uk",
        "first": ("Oliver", "Amelia", "George", "Isla", "Harry", "Ava", "Jack", "Emily", "Charlie", "Grace"),
        "last": ("Smith", "Jones", "Taylor", "Brown", "Williams", "Wilson", "Evans", "Thomas"),
    },
    "United States": {
        "cities": ("New York", "San Francisco", "Chicago", "Austin", "Boston"),
        "suffix": "Inc.",
        "tld": "com",
        "first": (
            "James",
            "Olivia",
            "Michael",
            "Emma",
            "David",
            "Sophia",
            "Daniel",
            "Mia",
            "Ethan",
            "Abigail",
        ),
        "last": ("Johnson", "Miller", "Davis", "Garcia", "Rodriguez", "Anderson", "Clark", "Lewis"),
    },
    "Japan": {
        "cities": ("Tokyo", "Osaka", "Yokohama", "Nagoya", "Fukuoka"),
        "suffix": "K.K.",
        "tld": "jp",
        "first": ("Haruto", "Yui", "Sota", "Hina", "Riku", "Aoi", "Yuto", "Mei", "Kaito", "Sakura"),
        "last": ("Sato", "Suzuki", "Takahashi", "Tanaka", "Watanabe", "Ito", "Yamamoto", "Nakamura"),
    },
    "Netherlands": {
        "cities": ("Amsterdam", "Rotterdam", "Utrecht", "Eindhoven", "The Hague"),
        "suffix": "B.V.",
        "tld": "nl",
        "first": ("Daan", "Emma", "Sem", "Julia", "Lucas", "Tess", "Levi", "Sara", "Finn", "Anna"),
        "last": ("de Jong", "Jansen", "de Vries", "van Dijk", "Bakker", "Visser", "Smit", "Meijer"),
    },
    "Spain": {
        "cities": ("Madrid", "Barcelona", "Valencia", "Seville", "Bilbao"),
        "suffix": "S.L.",
        "tld": "es",
        "first": (
            "Hugo",
            "Lucía",
            "Martín",
            "Sofía",
            "Pablo",
            "Martina",
            "Daniel",
            "Paula",
            "Álvaro",
            "Julia",
        ),
        "last": ("García", "Fernández", "González", "Rodríguez", "López", "Martínez", "Sánchez", "Pérez"),
    },
    "Sweden": {
        "cities": ("Stockholm", "Gothenburg", "Malmö", "Uppsala", "Linköping"),
        "suffix": "AB",
        "tld": "se",
        "first": ("William", "Alice", "Liam", "Maja", "Noah", "Elsa", "Hugo", "Astrid", "Oscar", "Wilma"),
        "last": ("Andersson", "Johansson", "Karlsson", "Nilsson", "Eriksson", "Larsson", "Olsson", "Persson"),
    },
}

_PREFIXES = (
    "Blue", "North", "Bright", "Silver", "Red", "Green", "Iron", "Clear",
    "Swift", "Open", "Prime", "Summit", "Harbor", "Alpine", "Golden", "Polar",
)  # fmt: skip

_INDUSTRY_WORDS: Mapping[str, tuple[str, ...]] = {
    "Software": ("Code", "Cloud", "Logic", "Data", "Byte", "Stack"),
    "Manufacturing": ("Works", "Tools", "Machines", "Steel", "Fabrication", "Components"),
    "Healthcare": ("Health", "Care", "Medical", "Pharma", "Clinics", "Diagnostics"),
    "Finance": ("Capital", "Finance", "Invest", "Payments", "Assurance", "Ledger"),
    "Retail": ("Retail", "Stores", "Market", "Goods", "Outlet", "Trading"),
    "Logistics": ("Logistics", "Freight", "Transport", "Cargo", "Shipping", "Fleet"),
    "Energy": ("Energy", "Power", "Solar", "Grid", "Wind", "Hydro"),
    "Education": ("Learning", "Academy", "Education", "Campus", "Tutoring", "Classroom"),
}

#: Companies every sample database has, so examples ("contacts at Acme") always find something.
_ANCHOR_COMPANIES: tuple[tuple[str, str, str, str], ...] = (
    ("Acme Corporation", "Manufacturing", "United States", "Chicago"),
    ("Nordwind Software GmbH", "Software", "Germany", "Berlin"),
    ("Maison Lumière SAS", "Retail", "France", "Paris"),
    ("Sakura Health K.K.", "Healthcare", "Japan", "Tokyo"),
)

_ROLES = (
    "CEO", "CTO", "CFO", "COO", "VP Sales", "Head of Procurement", "Software Engineer",
    "Product Manager", "Operations Manager", "Marketing Director", "Account Executive", "Data Analyst",
)  # fmt: skip

_PRODUCTS = (
    "Platform licence", "Support renewal", "Pilot project", "Enterprise rollout",
    "Consulting package", "Hardware upgrade", "Data migration", "Training programme",
)  # fmt: skip

_STAGE_WEIGHTS = (18, 18, 20, 16, 18, 10)  # lead, qualified, proposal, negotiation, won, lost
_STAGE_PROBABILITY = {"lead": 10, "qualified": 25, "proposal": 50, "negotiation": 75, "won": 100, "lost": 0}
_FIRST_CLOSE_DATE = date(2025, 1, 1)


@dataclass(frozen=True, kw_only=True, slots=True)
class SampleData:
    """The rows of the sample database, one tuple per table."""

    companies: tuple[dict[str, Any], ...]
    contacts: tuple[dict[str, Any], ...]
    deals: tuple[dict[str, Any], ...]

    @property
    def counts(self) -> dict[str, int]:
        return {"companies": len(self.companies), "contacts": len(self.contacts), "deals": len(self.deals)}


def _slug(text: str) -> str:
    ascii_text = text.lower().translate(str.maketrans("äöüéèàáçíóúñåøæ", "aoueeaaciounaoa"))
    return re.sub(r"[^a-z0-9]+", "", ascii_text.replace("ß", "ss"))


def generate_sample_data(seed: int = SEED) -> SampleData:
    """The sample rows; the same ``seed`` always gives the same rows."""
    rng = random.Random(seed)
    company_specs: list[tuple[str, str, str, str]] = list(_ANCHOR_COMPANIES)
    used = {spec[0] for spec in company_specs}
    while len(company_specs) < len(_ANCHOR_COMPANIES) + GENERATED_COMPANIES:
        industry = INDUSTRIES[len(company_specs) % len(INDUSTRIES)]
        country = COUNTRIES[(len(company_specs) * 3 + rng.randrange(len(COUNTRIES))) % len(COUNTRIES)]
        info = _COUNTRY_INFO[country]
        name = f"{rng.choice(_PREFIXES)} {rng.choice(_INDUSTRY_WORDS[industry])} {info['suffix']}"
        if name in used:
            continue
        used.add(name)
        company_specs.append((name, industry, country, rng.choice(info["cities"])))

    companies: list[dict[str, Any]] = []
    contacts: list[dict[str, Any]] = []
    deals: list[dict[str, Any]] = []
    for company_id, (name, industry, country, city) in enumerate(company_specs, start=1):
        info = _COUNTRY_INFO[country]
        employees = int(
            rng.choice((12, 25, 40, 80, 150, 300, 600, 1200, 2500, 8000)) * rng.uniform(0.8, 1.25)
        )
        companies.append(
            {
                "id": company_id,
                "name": name,
                "industry": industry,
                "country": country,
                "city": city,
                "employee_count": employees,
                "founded_year": rng.randrange(1950, 2021),
                "annual_revenue": round(employees * rng.uniform(60_000, 220_000), -3),
            }
        )
        domain = f"{_slug(name.rsplit(' ', 1)[0])}.{info['tld']}"
        company_contacts: list[int] = []
        for role in rng.sample(_ROLES, rng.randint(2, 4)):
            first, last = rng.choice(info["first"]), rng.choice(info["last"])
            contact_id = len(contacts) + 1
            company_contacts.append(contact_id)
            contacts.append(
                {
                    "id": contact_id,
                    "company_id": company_id,
                    "name": f"{first} {last}",
                    "email": f"{_slug(first)}.{_slug(last)}@{domain}",
                    "role": role,
                    "city": city,
                }
            )
        for product in rng.sample(_PRODUCTS, rng.randint(1, 3)):
            stage = rng.choices(DEAL_STAGES, weights=_STAGE_WEIGHTS)[0]
            amount = round(
                rng.choice((8_000, 20_000, 45_000, 90_000, 180_000, 350_000)) * rng.uniform(0.6, 1.6), -2
            )
            deals.append(
                {
                    "id": len(deals) + 1,
                    "company_id": company_id,
                    "contact_id": rng.choice(company_contacts),
                    "title": f"{product} - {name.rsplit(' ', 1)[0]}",
                    "amount": amount,
                    "stage": stage,
                    "close_date": _FIRST_CLOSE_DATE + timedelta(days=rng.randrange(0, 548)),
                    "probability": _STAGE_PROBABILITY[stage],
                }
            )
    return SampleData(companies=tuple(companies), contacts=tuple(contacts), deals=tuple(deals))


def create_tables(engine: Engine) -> None:
    """Create the ``rs_*`` tables when missing (tolerates another process creating them meanwhile)."""
    for attempt in range(3):
        try:
            RECORD_SEARCH_METADATA.create_all(engine)
            return
        except (OperationalError, ProgrammingError):
            if attempt == 2:
                raise


def _insert_missing(connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    dialect = connection.dialect.name
    if dialect == "postgresql":
        connection.execute(postgresql.insert(table).on_conflict_do_nothing(index_elements=["id"]), rows)
    elif dialect == "sqlite":
        connection.execute(sqlite.insert(table).on_conflict_do_nothing(index_elements=["id"]), rows)
    else:
        existing = set(connection.execute(select(table.c.id)).scalars())
        missing = [row for row in rows if row["id"] not in existing]
        if missing:
            connection.execute(table.insert(), missing)


def build_sample_database(engine: Engine, *, seed: int = SEED) -> dict[str, int]:
    """Create and fill the sample tables in ``engine``'s database; return the row count per table.

    Idempotent: rows already there (by id) are left alone.
    """
    create_tables(engine)
    data = generate_sample_data(seed)
    tables = ((companies_table, data.companies), (contacts_table, data.contacts), (deals_table, data.deals))
    with engine.begin() as connection:
        for table, rows in tables:
            _insert_missing(connection, table, rows)
    return count_records(engine)


def count_records(engine: Engine) -> dict[str, int]:
    """How many rows each sample table holds."""
    names = {"companies": companies_table, "contacts": contacts_table, "deals": deals_table}
    with engine.connect() as connection:
        return {
            name: int(connection.execute(select(func.count()).select_from(table)).scalar_one())
            for name, table in names.items()
        }


def load_tools(tool_store: Any, payloads: Iterable[tuple[str, Mapping[str, Any]]] | None = None) -> list[str]:
    """Write the agent's tool schemas into ``tool_store`` (``put(id, payload)``); return their ids."""
    items = list(TOOL_PAYLOADS.items()) if payloads is None else list(payloads)
    for tool_id, payload in items:
        tool_store.put(tool_id, payload)
    return [tool_id for tool_id, _ in items]

"""The record-search agent end to end on the offline model and the inline runner:
real records from the sample database, the intent gate, the explicit flow's progress."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import func, select

from agentloop.examples.record_search import (
    NO_PLAN_MESSAGE,
    RecordSearchGenerator,
    RecordSearchResources,
    build_sample_database,
    default_processor,
)
from agentloop.examples.record_search.sample_data import count_records, generate_sample_data
from agentloop.examples.record_search.schema import companies_table, contacts_table, deals_table
from agentloop.orchestration.llm.offline import LABEL, OfflineModel
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor


@pytest.fixture
async def offline_generator(record_db_url: str, no_model_env: None) -> AsyncIterator[RecordSearchGenerator]:
    async with RecordSearchGenerator.create_with_defaults(database_url=record_db_url) as made:
        yield made


def scalar(resources: RecordSearchResources, query: Any) -> Any:
    with resources.engine.connect() as connection:
        return connection.execute(query).scalar_one()


async def test_companies_in_a_country_and_industry_are_the_real_rows(
    offline_generator: RecordSearchGenerator, record_resources: RecordSearchResources
) -> None:
    result = await offline_generator.generate(message="Which software companies are in Germany?")
    assert result is not None
    expected = scalar(
        record_resources,
        select(func.count())
        .select_from(companies_table)
        .where(companies_table.c.country == "Germany", companies_table.c.industry == "Software"),
    )
    assert expected > 0
    assert result["found_count"] == expected == len(result["records"])
    assert result["is_truncated"] is False
    assert {record["category"] for record in result["records"]} == {"companies"}
    assert all(r["fields"]["country"] == "Germany" for r in result["records"])
    assert all(r["fields"]["industry"] == "Software" for r in result["records"])
    assert "Nordwind Software GmbH" in {record["label"] for record in result["records"]}
    assert result["message"].startswith(LABEL)
    assert f"Found {expected} companies" in result["message"]
    assert result["answered_by"] == "offline"


async def test_deals_over_an_amount_in_a_stage(
    offline_generator: RecordSearchGenerator, record_resources: RecordSearchResources
) -> None:
    result = await offline_generator.generate(message="Show me deals over 50000 in negotiation")
    assert result is not None
    expected = scalar(
        record_resources,
        select(func.count())
        .select_from(deals_table)
        .where(deals_table.c.amount > 50000, deals_table.c.stage == "negotiation"),
    )
    assert result["found_count"] == expected > 0
    assert all(
        r["fields"]["amount"] > 50000 and r["fields"]["stage"] == "negotiation" for r in result["records"]
    )
    amounts = [record["fields"]["amount"] for record in result["records"]]
    assert amounts == sorted(amounts, reverse=True)


async def test_following_a_relation_finds_the_contacts_of_a_company(
    offline_generator: RecordSearchGenerator, record_resources: RecordSearchResources
) -> None:
    result = await offline_generator.generate(message="Who are the contacts at Acme?")
    assert result is not None
    acme_contacts = scalar(
        record_resources,
        select(func.count())
        .select_from(contacts_table.join(companies_table))
        .where(companies_table.c.name == "Acme Corporation"),
    )
    assert result["found_count"] == acme_contacts > 0
    assert all(record["category"] == "contacts" for record in result["records"])
    assert all(record["fields"]["email"].endswith("@acme.com") for record in result["records"])


async def test_a_large_result_is_truncated_and_the_answer_says_so(
    offline_generator: RecordSearchGenerator,
) -> None:
    result = await offline_generator.generate(message="List the won deals")
    assert result is not None
    assert result["is_truncated"] is True
    assert len(result["records"]) == 20 < result["found_count"]
    assert "showing the first 20" in result["message"]


async def test_the_intent_gate_lets_searches_through_and_returns_none_for_chat(
    offline_generator: RecordSearchGenerator,
) -> None:
    for chat in ("Hello! How are you today?", "Thanks, that was helpful.", "What is the capital of France?"):
        assert await offline_generator.generate(message=chat) is None, chat
        verdict = await offline_generator.classify(message=chat)
        assert verdict is not None and verdict["is_search"] is False
    for search in ("companies in Sweden", "any Japanese healthcare firms?", "deals over 100k"):
        verdict = await offline_generator.classify(message=search)
        assert verdict is not None and verdict["is_search"] is True, search
        assert verdict["reason"].startswith(LABEL)


async def test_the_chat_flow_passes_history_to_the_model(record_db_url: str) -> None:
    seen: list[list[dict[str, Any]]] = []
    offline = default_processor({})
    assert isinstance(offline, OfflineModel)
    original = offline.send_request

    async def spy(**kwargs: Any) -> Any:
        seen.append(list(kwargs["history_messages"]))
        return await original(**kwargs)

    offline.send_request = spy  # type: ignore[method-assign]
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    async with RecordSearchGenerator.create_with_defaults(
        database_url=record_db_url, processor=offline
    ) as gen:
        result = await gen.generate(message="companies in France", history_messages=history)
    assert result is not None and result["found_count"] > 0
    assert len(seen) == 3 and all(turn == history for turn in seen)  # gate, plan, compose


async def test_the_explicit_flow_skips_the_gate_and_streams_phases(
    offline_generator: RecordSearchGenerator,
) -> None:
    phases: list[tuple[str, str]] = []

    async def notify(*, phase: str, status: str, message: str = "", **data: Any) -> None:
        phases.append((phase, status))

    result = await offline_generator.generate_for_explicit_search(
        message="deals in the UK", notify_progress=notify
    )
    assert result["found_count"] > 0
    assert phases == [
        ("plan", "started"),
        ("plan", "completed"),
        ("execute", "started"),
        ("execute", "completed"),
        ("compose", "started"),
        ("compose", "completed"),
    ]


async def test_an_unsearchable_request_gets_the_deterministic_rephrase_message(
    offline_generator: RecordSearchGenerator,
) -> None:
    phases: list[tuple[str, str]] = []
    result = await offline_generator.generate_for_explicit_search(
        message="Tell me a joke",
        notify_progress=lambda **event: phases.append((event["phase"], event["status"])),
    )
    assert result == {
        "message": NO_PLAN_MESSAGE,
        "records": [],
        "is_truncated": False,
        "found_count": 0,
        "answered_by": "offline",
    }
    assert phases == [("plan", "started"), ("plan", "failed")]


def test_the_sample_database_is_deterministic_and_idempotent(record_resources: RecordSearchResources) -> None:
    assert generate_sample_data() == generate_sample_data()
    before = count_records(record_resources.engine)
    assert build_sample_database(record_resources.engine) == before
    assert before == generate_sample_data().counts
    assert 300 <= sum(before.values()) <= 600
    assert before["companies"] >= 60 and before["contacts"] > before["companies"]
    assert record_resources.tool_store.get_payload("record_search.plan") is not None


def test_the_default_processor_follows_the_environment() -> None:
    assert isinstance(default_processor({}), OfflineModel)
    processor = default_processor({"OPENAI_API_KEY": "sk-test-not-a-real-key-123", "OPENAI_MODEL": "m1"})
    assert isinstance(processor, OpenAIProcessor) and processor.model == "m1"

"""A run's step-cache use in the run store: hits, misses and tokens saved, summed like token usage
(in memory, on SQLite and on PostgreSQL), and shown wherever the run's usage is shown."""

from __future__ import annotations

import pytest
from workflows.caching import LabelStage, LabelTicket

from agentloop.actions import InMemoryStepCache, Usage
from agentloop.loops import InlineAgentRunner
from agentloop.orchestration.celery_adapter.tasks import usage_of
from agentloop.orchestration.cli.runs import _cells
from agentloop.orchestration.errors import RunNotFoundError
from agentloop.orchestration.runtime.context import StandardContext
from agentloop.orchestration.store import InMemoryRunStore, InMemoryToolStore, RunRecord, RunStore
from agentloop.orchestration.store.seams import StoreUsageMeter
from agentloop.orchestration.web.schema import Run
from agentloop.orchestration.web.views import pending_view, run_view
from agentloop.testing import ScriptedModel, tool_call


def cache_use(record: RunRecord | None) -> tuple[int, int, int]:
    assert record is not None
    return record.cache_hits, record.cache_misses, record.tokens_saved


def test_a_batchs_summary_sums_its_childrens_cache_use_with_their_tokens(each_run_store: RunStore) -> None:
    each_run_store.create_run(run_id="batch", runnable="batch", input={})
    for child, (hits, misses, saved) in {"c1": (2, 1, 60), "c2": (0, 3, 0), "c3": (1, 0, 30)}.items():
        each_run_store.create_run(
            run_id=child, runnable="label", input={}, root_run_id=child, parent_run_id="batch"
        )
        each_run_store.add_usage(child, 10, 5)
        each_run_store.add_cache_usage(child, hits=hits, misses=misses, tokens_saved=saved)
    each_run_store.finish_run("c1", status="succeeded", output=None)

    summary = each_run_store.summarize_children("batch")

    assert summary["total"] == 3 and summary["by_status"] == {"succeeded": 1, "pending": 2}
    assert (summary["input_tokens"], summary["output_tokens"]) == (30, 15)
    assert (summary["cache_hits"], summary["cache_misses"], summary["tokens_saved"]) == (3, 4, 90)


def test_cache_use_adds_up_and_a_bad_count_or_an_unknown_run_is_refused(each_run_store: RunStore) -> None:
    each_run_store.create_run(run_id="r1", runnable="label", input={})
    assert cache_use(each_run_store.get_run("r1")) == (0, 0, 0)

    each_run_store.add_cache_usage("r1", misses=1)
    each_run_store.add_cache_usage("r1", hits=1, tokens_saved=30)
    each_run_store.add_cache_usage("r1", hits=2, tokens_saved=60)

    record = each_run_store.get_run("r1")
    assert cache_use(record) == (3, 1, 90)
    assert record is not None and RunRecord.from_dict(record.to_dict()) == record
    with pytest.raises(ValueError, match="tokens_saved"):
        each_run_store.add_cache_usage("r1", tokens_saved=-1)
    with pytest.raises(RunNotFoundError):
        each_run_store.add_cache_usage("ghost", hits=1)


async def test_the_store_meter_sums_a_runs_hits_misses_and_tokens_saved(each_run_store: RunStore) -> None:
    reply = tool_call(
        "label_ticket", {"label": "bug", "confidence": 0.9}, usage=Usage(input_tokens=20, output_tokens=4)
    )
    model = ScriptedModel([reply])
    context = StandardContext(
        processor=model, tool_store=InMemoryToolStore({"label_ticket": LabelTicket.tool_payload()})
    )
    runner = InlineAgentRunner.create(runnable=LabelStage, context=context, cache=InMemoryStepCache())
    each_run_store.create_run(run_id="run", runnable="caching.label", input={})

    for _ in range(3):
        await runner.request(input={"text": "It crashes."}, meter=StoreUsageMeter(each_run_store, "run"))

    record = each_run_store.get_run("run")
    assert cache_use(record) == (2, 1, 48)
    assert record is not None and (record.input_tokens, record.output_tokens) == (20, 4)
    assert len(model.requests) == 1


def test_the_web_views_the_progress_page_and_the_cli_show_the_cache_use() -> None:
    store = InMemoryRunStore()
    record = store.create_run(run_id="r1", runnable="label", input={})
    store.add_cache_usage("r1", hits=2, misses=1, tokens_saved=48)
    record = store.get_run("r1") or record

    for can_read in (True, False):
        usage = run_view(record, can_read=can_read)["usage"]
        assert (usage["cache_hits"], usage["cache_misses"], usage["tokens_saved"]) == (2, 1, 48)
    assert pending_view("r2", "label")["usage"]["cache_hits"] == 0
    graphql_usage = Run.of(run_view(record, can_read=False)).usage
    assert (graphql_usage.cache_hits, graphql_usage.cache_misses, graphql_usage.tokens_saved) == (2, 1, 48)
    assert usage_of(record) == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_hits": 2,
        "cache_misses": 1,
        "tokens_saved": 48,
        "tool_calls": 0,
    }
    assert _cells(record)["cache hit/miss"] == "2/1 (48 saved)"

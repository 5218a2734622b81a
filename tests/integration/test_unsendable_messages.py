"""A run whose next message would be refused at the workers' edge fails with the reason recorded,
and the message is never sent: a branch input nested too deep or too large, a stage output
nested too deep, a pipeline whose later stages carry a large input
(``orchestration/celery_adapter/outgoing.py``), on a real prefork worker. An output nested exactly
as deep as may be handed on passes every edge on its way, in a chain and in a bounded composite's lanes."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import CeleryAgentRunner, WorkflowFailedError
from agentloop.orchestration.celery_adapter.edge import MAX_BODY_BYTES, MAX_DEPTH
from agentloop.orchestration.celery_adapter.outgoing import MAX_OUTPUT_DEPTH

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("runnable", "says"),
    [
        ("outgoing.deep_branch", f"args are nested deeper than {MAX_DEPTH} levels"),
        ("outgoing.big_branch", f"more than {MAX_BODY_BYTES}"),
        ("outgoing.deep_output", f"nested deeper than {MAX_DEPTH - 3} levels"),
    ],
)
def test_a_run_whose_next_message_the_edge_would_refuse_fails_with_the_reason(
    lone_worker: Any, runnable: str, says: str
) -> None:
    assert_refused_before_it_is_sent(lone_worker, runnable, None, says)


def test_a_pipeline_whose_later_stages_carry_a_large_input_is_refused_before_it_is_sent(
    lone_worker: Any,
) -> None:
    # the launch (3 MiB) passes the edge; the chain of three stages, each carrying it, would not
    large = "x" * (3 * 1024 * 1024)
    assert_refused_before_it_is_sent(
        lone_worker, "outgoing.carrying_pipeline", large, f"more than {MAX_BODY_BYTES}"
    )


def test_an_output_nested_exactly_at_the_limit_is_handed_on_and_one_level_more_is_refused(
    lone_worker: Any,
) -> None:
    at_the_limit = CeleryAgentRunner.create(
        runnable="outgoing.output_at_the_limit", app=lone_worker.app, store=lone_worker.store
    ).request_sync(input=None)
    assert at_the_limit.wait_sync(timeout=60) == MAX_OUTPUT_DEPTH  # the next stage got all of it

    says = f"nested deeper than {MAX_OUTPUT_DEPTH} levels"
    assert_refused_before_it_is_sent(lone_worker, "outgoing.output_past_the_limit", None, says)


def test_outputs_at_the_limit_reach_a_bounded_composite_s_merge_through_its_lanes(lone_worker: Any) -> None:
    handle = CeleryAgentRunner.create(
        runnable="outgoing.lanes_at_the_limit", app=lone_worker.app, store=lone_worker.store
    ).request_sync(input=None)
    assert handle.wait_sync(timeout=60) == [MAX_OUTPUT_DEPTH] * 3
    assert ping_answers(lone_worker.app)


def test_a_pack_whose_outputs_together_are_too_large_is_refused_before_its_result_is_sent(
    lone_worker: Any,
) -> None:
    # four outputs of a third of the limit each: each may travel alone, the pack's result may not
    assert_refused_before_it_is_sent(lone_worker, "outgoing.big_pack", 4, "together they are")
    # two of them fit one message: the merge gets both
    handle = CeleryAgentRunner.create(
        runnable="outgoing.big_pack", app=lone_worker.app, store=lone_worker.store
    ).request_sync(input=2)
    assert handle.wait_sync(timeout=60) == [MAX_BODY_BYTES // 3] * 2


def assert_refused_before_it_is_sent(lone_worker: Any, runnable: str, input: Any, says: str) -> None:
    runner = CeleryAgentRunner.create(runnable=runnable, app=lone_worker.app, store=lone_worker.store)
    handle = runner.request_sync(input=input)
    with pytest.raises(WorkflowFailedError) as failed:
        handle.wait_sync(timeout=60)
    assert failed.value.error_type == "UnsendableMessageError"
    record = lone_worker.store.get_run(handle.run_id)  # ended before the failed result was stored
    assert record is not None and record.status == "failed"
    assert record.error is not None and record.error["type"] == "UnsendableMessageError"
    assert "refused at the workers' edge" in record.error["message"]
    assert says in record.error["message"]
    assert ping_answers(lone_worker.app)  # the worker is up, nothing was refused at its edge


def ping_answers(app: Any) -> bool:
    return bool(app.send_task("agentloop.ping").get(timeout=10) == "pong")

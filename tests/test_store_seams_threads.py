"""The store seams under a threads worker: the hundreds of branch tasks of one composite that start
at once in one process ask the run store for the cancel flag once, not once each."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from agentloop import new_run_id
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.store.seams import StoreCancelSignal


class SlowStore(InMemoryRunStore):
    """Answers the cancel question only once the test lets it; counts the questions."""

    def __init__(self) -> None:
        super().__init__()
        self.questions = 0
        self.asked = threading.Event()
        self.answer = threading.Event()

    def is_cancel_requested(self, run_id: str) -> bool:
        self.questions += 1
        self.asked.set()
        assert self.answer.wait(10)
        return super().is_cancel_requested(run_id)


def test_threads_checking_while_one_asks_keep_their_answer_and_the_store_is_asked_once() -> None:
    store, run_id = SlowStore(), new_run_id()
    store.create_run(run_id=run_id, runnable="x", input=None)
    with ThreadPoolExecutor(max_workers=50) as pool:
        asking = pool.submit(StoreCancelSignal(store, run_id).is_cancelled)
        assert store.asked.wait(10)
        others = [pool.submit(StoreCancelSignal(store, run_id).is_cancelled) for _ in range(200)]
        assert [other.result(10) for other in others] == [False] * 200  # not held up by the question
        store.answer.set()
        assert asking.result(10) is False
    assert store.questions == 1


def test_a_cancel_is_seen_by_every_thread_once_the_one_question_is_answered() -> None:
    store, run_id = SlowStore(), new_run_id()
    store.create_run(run_id=run_id, runnable="x", input=None)
    store.request_cancel(run_id)
    store.answer.set()
    with ThreadPoolExecutor(max_workers=50) as pool:
        assert pool.submit(StoreCancelSignal(store, run_id).is_cancelled).result(10) is True
        answers = [pool.submit(StoreCancelSignal(store, run_id).is_cancelled) for _ in range(200)]
        assert [answer.result(10) for answer in answers] == [True] * 200
    assert store.questions == 1


def test_two_stores_in_one_process_never_answer_for_each_other() -> None:
    # the same run id in two stores (two apps, or two tests, in one process): a cancel in one
    # must not read as a cancel in the other
    cancelled, other = InMemoryRunStore(), InMemoryRunStore()
    run_id = new_run_id()
    for store in (cancelled, other):
        store.create_run(run_id=run_id, runnable="x", input=None)
    cancelled.request_cancel(run_id)

    assert StoreCancelSignal(cancelled, run_id).is_cancelled() is True
    assert StoreCancelSignal(other, run_id).is_cancelled() is False


def test_in_a_pack_a_stale_answer_is_asked_again_in_a_thread_while_the_loop_goes_on() -> None:
    """A pack's cancel signal (``offload``: its threads) asks a stale answer again off its event
    loop, keeping the old one meanwhile; a cancel is seen once that answer is in. A run's first
    answer is asked at once. On the loop the read held every branch of the pack."""
    import asyncio

    from agentloop.orchestration.packing.threads import pack_threads

    store, run_id = SlowStore(), new_run_id()
    store.create_run(run_id=run_id, runnable="x", input=None)
    store.answer.set()  # the first answer: at once, on the caller's thread

    async def pack() -> tuple[bool, bool, bool]:
        with pack_threads() as threads:
            signal = StoreCancelSignal(store, run_id, interval=0.0, offload=threads)
            first = signal.is_cancelled()
            store.answer.clear()
            store.asked.clear()
            store.request_cancel(run_id)
            while_asking = signal.is_cancelled()  # stale: asked in a thread, held by the store
            assert await asyncio.to_thread(store.asked.wait, 10)
            store.answer.set()
            for _ in range(1000):  # the thread's answer comes in; a later check sees it
                await asyncio.sleep(0.01)
                if signal.is_cancelled():
                    return first, while_asking, True
            return first, while_asking, False

    assert asyncio.run(pack()) == (False, False, True)

"""Human in the loop on Celery: questions recorded in the run store, paused tasks re-sent on answer."""

from orchestration.human.channel import StoreHumanChannel
from orchestration.human.waits import InMemoryWaitStore, SqlWaitStore, Wait, WaitStore, wait_store_for

__all__ = ["InMemoryWaitStore", "SqlWaitStore", "StoreHumanChannel", "Wait", "WaitStore", "wait_store_for"]

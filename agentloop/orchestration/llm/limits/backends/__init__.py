"""Where the counters of a window limit live: in this process, or in Redis for every process."""

from agentloop.orchestration.llm.limits.backends.memory import MemoryBackend
from agentloop.orchestration.llm.limits.backends.redis import RedisBackend

__all__ = ["MemoryBackend", "RedisBackend"]

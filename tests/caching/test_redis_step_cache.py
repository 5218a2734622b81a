"""``RedisStepCache`` on a private Redis: JSON text under ``agentloop:cache:<key>`` with a Redis
expiry; a Redis that cannot be reached is a miss, and is left alone for a while. And which cache
``AGENTLOOP_CACHE_URL`` names."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis import Redis

from agentloop.actions import InMemoryStepCache
from agentloop.orchestration.errors import SettingsError
from agentloop.orchestration.runtime.step_cache import CACHE_KEY_PREFIX, RedisStepCache, step_cache_for
from agentloop.orchestration.settings import load_settings
from tests.services.redis_server import RedisServer
from tests.services.worker_environment import redis_fixture

pytestmark = pytest.mark.integration


class AskedRedis(Redis):
    """A client that keeps the name of every command it was asked to send."""

    asked: list[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.__dict__.setdefault("asked", []).append(str(args[0]).lower())
        return super().execute_command(*args, **options)


redis_server = redis_fixture("module")


async def test_a_value_is_kept_under_the_prefix_with_a_redis_expiry(redis_server: RedisServer) -> None:
    cache = RedisStepCache(redis_server.url)
    client = Redis.from_url(redis_server.url)
    try:
        await cache.set("k1", '{"v": 1}', ttl=0.3)
        assert await cache.get("k1") == '{"v": 1}'
        assert client.get(CACHE_KEY_PREFIX + "k1") == b'{"v": 1}'
        assert 0 < client.pttl(CACHE_KEY_PREFIX + "k1") <= 300
        await asyncio.sleep(0.4)
        assert await cache.get("k1") is None
        assert await cache.get("never-set") is None
    finally:
        cache.close()
        client.close()


async def test_a_redis_that_cannot_be_reached_is_a_miss_and_is_not_asked_again_for_a_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = AskedRedis.from_url("redis://127.0.0.1:1/0", socket_timeout=0.5, socket_connect_timeout=0.5)
    cache = RedisStepCache("redis://127.0.0.1:1/0", retry_interval=60, client=client)
    await cache.set("k", "v", ttl=10)
    assert await cache.get("k") is None
    assert client.asked == ["set"]  # the get did not ask: the set had just failed
    assert [r.levelname for r in caplog.records if "step cache" in r.getMessage()] == ["WARNING"]
    assert "steps run uncached" in caplog.text


def test_the_cache_url_names_redis_memory_or_none(redis_server: RedisServer) -> None:
    assert isinstance(step_cache_for(redis_server.url), RedisStepCache)
    assert isinstance(step_cache_for("memory://"), InMemoryStepCache)
    assert step_cache_for("none") is None
    with pytest.raises(ValueError, match="no step cache"):
        step_cache_for("http://example.com")


def test_the_cache_url_defaults_to_the_redis_result_backend_or_broker_else_memory() -> None:
    assert load_settings({}).cache_url == "memory://"
    assert load_settings({"REDIS_URL": "redis://r:6379/0"}).cache_url == "redis://r:6379/0"
    amqp_with_redis_results = {"BROKER_URL": "amqp://guest@mq//", "RESULT_BACKEND": "redis://r:6379/3"}
    assert load_settings(amqp_with_redis_results).cache_url == "redis://r:6379/3"
    assert load_settings({"BROKER_URL": "amqp://guest@mq//"}).cache_url == "memory://"
    assert load_settings({"AGENTLOOP_CACHE_URL": "none"}).cache_url == "none"
    with pytest.raises(SettingsError, match="AGENTLOOP_CACHE_URL"):
        load_settings({"AGENTLOOP_CACHE_URL": "http://cache"})

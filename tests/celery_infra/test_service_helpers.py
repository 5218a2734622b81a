"""Missing servers skip a test locally and fail it under CI; external servers come from the environment."""

from __future__ import annotations

import pytest

from tests.services import rabbitmq as rabbitmq_module
from tests.services.rabbitmq import private_rabbitmq_vhost
from tests.services.redis_server import (
    ServiceRequiredError,
    ServiceUnavailable,
    private_redis,
    private_redis_server,
    service_unavailable,
)


@pytest.fixture
def no_servers(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """No redis-server on PATH, no external URLs, nothing listening where RabbitMQ would be."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("AGENTLOOP_TEST_REDIS_URL", raising=False)
    monkeypatch.delenv("AGENTLOOP_TEST_AMQP_URL", raising=False)
    monkeypatch.setattr(rabbitmq_module, "_answers_tcp", lambda host, port: False)


@pytest.mark.parametrize("ci", ["", "false", "0"])
def test_a_missing_service_is_skippable_outside_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    error = service_unavailable("no Redis")
    assert isinstance(error, ServiceUnavailable)
    assert error.reason == "no Redis"


@pytest.mark.parametrize("ci", ["true", "TRUE", "1", "yes"])
def test_a_missing_service_is_an_error_under_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    error = service_unavailable("no Redis")
    assert isinstance(error, ServiceRequiredError)
    assert not isinstance(error, ServiceUnavailable)
    assert "no Redis" in str(error)


@pytest.mark.usefixtures("no_servers")
def test_no_redis_anywhere_raises_service_unavailable_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(ServiceUnavailable, match="AGENTLOOP_TEST_REDIS_URL"), private_redis():
        pytest.fail("unreachable")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(ServiceRequiredError), private_redis():
        pytest.fail("unreachable")


@pytest.mark.usefixtures("no_servers")
def test_no_rabbitmq_raises_service_unavailable_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(ServiceUnavailable, match="AGENTLOOP_TEST_AMQP_URL"), private_rabbitmq_vhost():
        pytest.fail("unreachable")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(ServiceRequiredError), private_rabbitmq_vhost():
        pytest.fail("unreachable")


@pytest.mark.usefixtures("no_servers")
def test_an_external_redis_url_is_used_as_given_and_cannot_be_restarted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTLOOP_TEST_REDIS_URL", "redis://ci-redis:6379/7")
    with private_redis_server() as server:
        assert server.url == "redis://ci-redis:6379/7"
        assert not server.restartable
        with pytest.raises(RuntimeError, match="external"):
            server.stop()
    with private_redis() as url:
        assert url == "redis://ci-redis:6379/7"

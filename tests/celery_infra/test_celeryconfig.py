"""celeryconfig projects the environment's settings for Celery, with defaults that need no server.

Each test loads a fresh copy of ``celeryconfig.py`` under the environment it
sets, so the module everybody else imports is never reloaded.
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Callable
from types import ModuleType

import pytest

from agentloop import celeryconfig
from agentloop.orchestration.errors import SettingsError
from agentloop.orchestration.settings import env_names

LoadConfig = Callable[..., ModuleType]


@pytest.fixture
def load_config(monkeypatch: pytest.MonkeyPatch) -> LoadConfig:
    """``load_config(REDIS_URL=...)``: a fresh celeryconfig module read under exactly that environment."""

    def load(**env: str) -> ModuleType:
        for name in env_names():
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        spec = importlib.util.spec_from_file_location(
            f"_celeryconfig_{uuid.uuid4().hex}", celeryconfig.__file__
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


ENVIRONMENTS = {
    "nothing set": {},
    "redis": {"REDIS_URL": "redis://127.0.0.1:6379/0"},
    "rabbitmq + redis": {
        "BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//",
        "REDIS_URL": "redis://h:6379/1",
    },
    "rabbitmq alone": {"BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//"},
    "explicit backend": {"BROKER_URL": "redis://h/0", "RESULT_BACKEND": "db+postgresql://u:p@h/db"},
}


@pytest.mark.parametrize("env", ENVIRONMENTS.values(), ids=ENVIRONMENTS.keys())
def test_json_is_the_only_serializer_in_every_environment(
    load_config: LoadConfig, env: dict[str, str]
) -> None:
    config = load_config(**env)
    assert config.task_serializer == "json"
    assert config.result_serializer == "json"
    assert config.accept_content == ["json"]
    assert config.result_accept_content == ["json"]


@pytest.mark.parametrize("env", ENVIRONMENTS.values(), ids=ENVIRONMENTS.keys())
def test_worker_defaults_fit_long_llm_tasks_in_every_environment(
    load_config: LoadConfig, env: dict[str, str]
) -> None:
    config = load_config(**env)
    assert config.task_acks_late is True
    assert config.task_reject_on_worker_lost is True
    assert config.worker_prefetch_multiplier == 1
    assert (config.task_soft_time_limit, config.task_time_limit) == (900, 960)
    assert config.broker_transport_options["visibility_timeout"] > config.task_time_limit
    assert config.broker_connection_retry_on_startup is True
    assert config.broker_connection_retry is True
    assert config.broker_connection_max_retries == 100


def test_nothing_set_means_in_memory_broker_and_results(load_config: LoadConfig) -> None:
    config = load_config()
    assert config.broker_url == "memory://"
    assert config.result_backend == "cache+memory://"


def test_the_in_memory_transport_polls_quickly_and_others_keep_their_defaults(
    load_config: LoadConfig,
) -> None:
    assert load_config().broker_transport_options["polling_interval"] <= 0.05
    assert "polling_interval" not in load_config(REDIS_URL="redis://h/0").broker_transport_options


def test_redis_url_alone_is_broker_and_result_backend(load_config: LoadConfig) -> None:
    config = load_config(REDIS_URL="redis://:pw@127.0.0.1:6379/2")
    assert config.broker_url == "redis://:pw@127.0.0.1:6379/2"
    assert config.result_backend == "redis://:pw@127.0.0.1:6379/2"


def test_rabbitmq_broker_keeps_results_in_redis_when_redis_url_is_set(load_config: LoadConfig) -> None:
    config = load_config(BROKER_URL="amqp://guest:guest@127.0.0.1:5672//", REDIS_URL="redis://h:6379/1")
    assert config.broker_url == "amqp://guest:guest@127.0.0.1:5672//"
    assert config.result_backend == "redis://h:6379/1"


def test_rabbitmq_broker_alone_falls_back_to_rpc_results(load_config: LoadConfig) -> None:
    assert load_config(BROKER_URL="amqp://guest:guest@h//").result_backend == "rpc://"
    assert load_config(BROKER_URL="pyamqp://guest:guest@h//").result_backend == "rpc://"


def test_redis_broker_alone_keeps_results_on_the_same_server(load_config: LoadConfig) -> None:
    assert load_config(BROKER_URL="rediss://h:6380/4").result_backend == "rediss://h:6380/4"


def test_result_backend_wins_over_everything(load_config: LoadConfig) -> None:
    config = load_config(BROKER_URL="amqp://h//", REDIS_URL="redis://h/0", RESULT_BACKEND="redis://other/5")
    assert config.result_backend == "redis://other/5"


def test_a_broker_with_no_known_result_backend_is_a_configuration_error(load_config: LoadConfig) -> None:
    with pytest.raises(ValueError, match="RESULT_BACKEND"):
        load_config(BROKER_URL="sqs://key:secret@")


def test_blank_variables_count_as_unset(load_config: LoadConfig) -> None:
    config = load_config(BROKER_URL="  ", REDIS_URL="", AGENTLOOP_TASK_TIME_LIMIT=" ")
    assert config.broker_url == "memory://"
    assert config.task_time_limit == 960


def test_time_limits_come_from_the_environment_and_move_the_visibility_timeout(
    load_config: LoadConfig,
) -> None:
    config = load_config(AGENTLOOP_TASK_SOFT_TIME_LIMIT="3000", AGENTLOOP_TASK_TIME_LIMIT="3600")
    assert (config.task_soft_time_limit, config.task_time_limit) == (3000, 3600)
    assert config.broker_transport_options["visibility_timeout"] == 3900


def test_an_explicit_visibility_timeout_must_exceed_the_hard_limit(load_config: LoadConfig) -> None:
    assert (
        load_config(AGENTLOOP_VISIBILITY_TIMEOUT="7200").broker_transport_options["visibility_timeout"]
        == 7200
    )
    with pytest.raises(ValueError, match="would be delivered twice"):
        load_config(AGENTLOOP_VISIBILITY_TIMEOUT="960")


def test_the_soft_limit_must_be_below_the_hard_limit(load_config: LoadConfig) -> None:
    with pytest.raises(ValueError, match="AGENTLOOP_TASK_SOFT_TIME_LIMIT"):
        load_config(AGENTLOOP_TASK_SOFT_TIME_LIMIT="60", AGENTLOOP_TASK_TIME_LIMIT="60")


def test_a_malformed_number_names_its_variable(load_config: LoadConfig) -> None:
    with pytest.raises(ValueError, match="AGENTLOOP_RESULT_EXPIRES must be a non-negative integer"):
        load_config(AGENTLOOP_RESULT_EXPIRES="a week")
    with pytest.raises(ValueError, match="must be a non-negative integer"):
        load_config(AGENTLOOP_TASK_TIME_LIMIT="-1")


def test_imports_are_parsed_from_agentloop_imports(load_config: LoadConfig) -> None:
    assert load_config().imports == ()
    config = load_config(AGENTLOOP_IMPORTS=" examples.search , ,myapp.agents,, ")
    assert config.imports == ("examples.search", "myapp.agents")


def test_fixed_settings(load_config: LoadConfig) -> None:
    config = load_config()
    assert config.task_default_queue == "agentloop"
    assert config.timezone == "UTC"
    assert config.enable_utc is True
    assert config.result_extended is False  # arguments are not copied into the backend
    assert config.result_expires == 7 * 24 * 3600
    assert config.task_track_started is True
    assert config.worker_send_task_events is True
    assert config.task_send_sent_event is True
    assert list(config.beat_schedule) == ["agentloop-resume-settled"]  # orchestration/celery_adapter/pause.py
    assert config.beat_schedule["agentloop-resume-settled"]["task"] == "agentloop.resume_settled"


def test_a_retention_adds_the_hourly_prune_to_beat(load_config: LoadConfig) -> None:
    config = load_config(AGENTLOOP_RUN_RETENTION="30d")
    assert list(config.beat_schedule) == ["agentloop-resume-settled", "agentloop-prune-runs"]
    assert config.beat_schedule["agentloop-prune-runs"]["task"] == "agentloop.prune_runs"
    assert config.beat_schedule["agentloop-prune-runs"]["schedule"].run_every.total_seconds() == 3600


def test_tuning_knobs_come_from_the_environment(load_config: LoadConfig) -> None:
    config = load_config(
        AGENTLOOP_TASK_DEFAULT_QUEUE="agents-eu",
        AGENTLOOP_RESULT_EXPIRES="3600",
        AGENTLOOP_BROKER_CONNECTION_MAX_RETRIES="0",
        AGENTLOOP_WORKER_PREFETCH_MULTIPLIER="2",
    )
    assert config.task_default_queue == "agents-eu"
    assert config.result_expires == 3600
    assert config.broker_connection_max_retries == 0  # Celery: retry forever
    assert config.worker_prefetch_multiplier == 2


def test_every_variable_of_celerys_settings_is_documented(load_config: LoadConfig) -> None:
    doc = load_config().__doc__ or ""
    not_celerys = {"DATABASE_URL", "AGENTLOOP_HOME", "AGENTLOOP_CHECKPOINT_SECONDS"}
    not_celerys |= {"AGENTLOOP_STORE_RETRY_SECONDS", "AGENTLOOP_RUN_RETENTION"}  # the run store's
    not_celerys |= {"AGENTLOOP_WIRE_VERSION_OVERRIDE"}  # the wire contract's (wire_versions.py)
    not_celerys |= {"AGENTLOOP_CACHE_URL"}  # the step cache's (runtime/step_cache.py)
    not_celerys |= {"AGENTLOOP_METRICS_PORT", "AGENTLOOP_METRICS_HOST"}  # the metrics' (worker bootstep)
    not_celerys |= {"AGENTLOOP_RECORD_RUNS", "AGENTLOOP_PACK_SIZE"}  # recordings', the canvas's
    not_celerys |= {"AGENTLOOP_FAIR_SLOTS", "AGENTLOOP_CONCURRENCY_LEASE_SECONDS"}  # the launch's admission
    not_celerys |= {"AGENTLOOP_EVENT_LOOP"}  # the worker's task loops (celery_adapter/event_loops.py)
    not_celerys |= {
        "AGENTLOOP_TRACING_EXPORTER",
        "AGENTLOOP_TRACING_CAPTURE_PROMPTS",
    }  # tracing's, not Celery's
    celery_variables = set(env_names()) - not_celerys
    celery_variables -= {
        name for name in env_names() if name.startswith(("OPENAI_", "AGENTLOOP_MODEL_", "AGENTLOOP_HTTP_"))
    }
    # the model provider's (settings_provider.py), not Celery's
    celery_variables -= {name for name in env_names() if name.startswith("ANTHROPIC_")}
    celery_variables -= {"AGENTLOOP_MODEL", "AGENTLOOP_ALLOW_MODEL_REQUESTS"}
    # the metrics endpoints' (settings/metrics.py), not Celery's
    celery_variables -= {name for name in env_names() if name.startswith("AGENTLOOP_METRICS_")}
    celery_variables -= {"AGENTLOOP_RECORD_RUNS"}  # replay's recording (orchestration/replay.py)
    celery_variables -= {"AGENTLOOP_PACK_SIZE"}  # a composite's branches per task (the engine's)
    assert len(celery_variables) == 15
    assert all(f"\n``{name}``\n" in doc for name in celery_variables)


def test_a_malformed_variable_stops_the_import_with_a_settings_error(load_config: LoadConfig) -> None:
    expected = "AGENTLOOP_WORKER_PREFETCH_MULTIPLIER must be a non-negative integer"
    with pytest.raises(SettingsError, match=expected):
        load_config(AGENTLOOP_WORKER_PREFETCH_MULTIPLIER="one")


def test_dead_workers_messages_are_swept_back_on_a_configurable_interval(load_config: LoadConfig) -> None:
    assert load_config().broker_transport_options["unacked_restore_interval"] == 60
    assert load_config().broker_transport_options["unacked_restore_throttle"] == 1
    options = load_config(AGENTLOOP_UNACKED_RESTORE_SECONDS="2").broker_transport_options
    assert options["unacked_restore_interval"] == 2
    assert options["unacked_mutex_expire"] == 2  # the sweep's lock outlives a dead worker this long

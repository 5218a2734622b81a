"""The example deployment files (``deploy/``) are valid and keep the rules of ``docs/deployment.md``."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML and Flower are in the dev extra: a missing install fails here, loudly
from flower import options as flower_options

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNITS = DEPLOY / "systemd"
SERVICE_UNITS = sorted(UNITS.glob("*.service"))
ENV_EXAMPLE = DEPLOY / "agentloop.env.example"
SOURCES = [
    ROOT / "agentloop" / "celeryconfig.py",
    *(ROOT / "agentloop" / "orchestration").rglob("*.py"),
    *(ROOT / "agentloop" / "examples").rglob("*.py"),
]
VARIABLE = re.compile(r"\b(?:AGENTLOOP|OPENAI|DATABASE|REDIS|BROKER|RESULT)_[A-Z0-9_]+\b")


# -- helpers -----------------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    document = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert isinstance(document, dict)
    return document


def argv(command: Any) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command or []]


def celery_command(service: dict[str, Any]) -> str | None:
    """``worker``, ``beat``, ``flower``... when the service runs ``celery -A agentloop <that>``."""
    words = argv(service.get("command"))
    if words[:3] == ["celery", "-A", "agentloop"] and len(words) > 3:
        return words[3]
    return None


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string(path.read_text(), source=str(path))
    return parser


def exec_start(path: Path) -> str:
    return " ".join(unit(path)["Service"]["ExecStart"].replace("\\\n", " ").split())


def env_example() -> dict[str, str]:
    """Every ``KEY=value`` of the example, set or commented out (``# KEY=value``)."""
    entries: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = re.fullmatch(r"#?\s*([A-Z][A-Z0-9_]*)=(.*)", line.strip())
        if match:
            entries[match.group(1)] = match.group(2)
    return entries


def env_set() -> dict[str, str]:
    entries = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            entries[key.strip()] = value
    return entries


def project_variables() -> set[str]:
    return {name for path in SOURCES for name in VARIABLE.findall(path.read_text())}


def celeryconfig_variables() -> set[str]:
    doc = (ROOT / "agentloop" / "celeryconfig.py").read_text().split('"""')[1]
    return set(re.findall(r"^``([A-Z][A-Z0-9_]+)``$", doc, flags=re.MULTILINE))


def flower_variables() -> set[str]:
    return {f"FLOWER_{name.upper().replace('-', '_')}" for name in flower_options.default_options._options}


def redis_directives() -> dict[str, str]:
    directives = {}
    for line in (DEPLOY / "redis.conf").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            directives[key.lower()] = value.strip()
    return directives


# -- docker compose ------------------------------------------------------------------------------


def test_compose_runs_exactly_one_beat_and_workers_with_celerys_own_command() -> None:
    services = compose()["services"]
    beats = [name for name, service in services.items() if celery_command(service) == "beat"]
    workers = [name for name, service in services.items() if celery_command(service) == "worker"]
    assert beats == ["beat"]
    assert services["beat"].get("deploy", {}).get("replicas", 1) == 1
    assert workers and all(services[name].get("deploy", {}).get("replicas", 1) >= 1 for name in workers)
    for service in services.values():
        words = argv(service.get("command"))
        if "worker" in words and "celery" in words:
            assert words[:4] == ["celery", "-A", "agentloop", "worker"], words


def test_compose_flower_is_authenticated_read_only_and_on_the_loopback() -> None:
    document = compose()
    flower = document["services"]["flower"]
    assert celery_command(flower) == "flower"
    assert "FLOWER_BASIC_AUTH" in flower["environment"]
    assert str(flower["environment"]["FLOWER_READ_ONLY"]).lower() == "true"
    assert all(str(port).startswith("127.0.0.1:") for port in flower.get("ports", []))
    assert "FLOWER_UNAUTHENTICATED_API" not in (DEPLOY / "docker-compose.yml").read_text()


def test_compose_services_redis_postgres_and_the_migration_hang_together() -> None:
    document = compose()
    services = document["services"]
    assert {"redis", "postgres", "migrate", "worker", "beat", "flower"} <= set(services)
    redis = argv(services["redis"]["command"])
    assert redis[:2] == ["redis-server", "/usr/local/etc/redis/redis.conf"]
    assert "./redis.conf:/usr/local/etc/redis/redis.conf:ro" in services["redis"]["volumes"]
    assert "upgrade_database()" in " ".join(argv(services["migrate"]["command"]))
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"
        for volume in service.get("volumes", []):
            source = str(volume).split(":", 1)[0]
            if not source.startswith("."):
                assert source in document["volumes"], f"{name}: undeclared volume {source}"
        if "build" in service:
            assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    for dependant in ("worker", "beat"):
        assert services[dependant]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_the_dockerfile_builds_from_the_repository_with_existing_paths_and_extras() -> None:
    lines = [line.strip() for line in (DEPLOY / "Dockerfile").read_text().splitlines()]
    assert "FROM python:3.11-slim" in lines
    for line in lines:
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"COPY source missing: {source}"
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras = re.search(r"pip install '\.\[([a-z,]+)\]'", "\n".join(lines))
    assert extras is not None
    for extra in extras.group(1).split(","):
        assert re.search(rf"^{extra} = \[", pyproject, flags=re.MULTILINE), f"no extra {extra!r}"
    assert any(line.startswith("USER ") and line != "USER root" for line in lines)


# -- systemd -------------------------------------------------------------------------------------


def test_the_systemd_units_parse_and_restart_their_service() -> None:
    names = {path.name for path in SERVICE_UNITS}
    assert {
        "agentloop-worker@.service",
        "agentloop-beat.service",
        "agentloop-flower.service",
        "agentloop-migrate.service",
    } <= names
    for path in SERVICE_UNITS:
        parsed = unit(path)
        assert {"Unit", "Service", "Install"} <= set(parsed.sections()), path.name
        service = parsed["Service"]
        assert service.get("ExecStart"), path.name
        assert service.get("Restart") in {"always", "on-failure"}, path.name
        assert service.get("EnvironmentFile") == "/etc/agentloop/agentloop.env", path.name
        assert service.get("User") not in (None, "root"), path.name


def test_the_units_run_celerys_commands_with_a_warm_shutdown_long_enough_for_a_task() -> None:
    worker = exec_start(UNITS / "agentloop-worker@.service")
    assert worker.startswith("/opt/agentloop/.venv/bin/celery -A agentloop worker ")
    assert "--hostname=worker%i@%H" in worker and "--pool=prefork" in worker
    assert exec_start(UNITS / "agentloop-beat.service").startswith(
        "/opt/agentloop/.venv/bin/celery -A agentloop beat "
    )
    flower = exec_start(UNITS / "agentloop-flower.service")
    assert flower.startswith("/opt/agentloop/.venv/bin/celery -A agentloop flower ")
    assert "--address=127.0.0.1" in flower and "basic" not in flower  # the password stays in the env file
    service = unit(UNITS / "agentloop-worker@.service")["Service"]
    assert (service["KillSignal"], service["KillMode"]) == ("SIGTERM", "mixed")
    assert int(service["TimeoutStopSec"]) > int(env_set()["AGENTLOOP_TASK_TIME_LIMIT"])


@pytest.fixture
def units_as_installed(tmp_path: Path) -> Iterator[list[Path]]:
    """The units in a folder, the worker template instantiated as ``agentloop-worker@1.service``."""
    paths = []
    for path in SERVICE_UNITS:
        target = tmp_path / path.name.replace("@.service", "@1.service")
        shutil.copy(path, target)
        paths.append(target)
    yield paths


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_finds_nothing_but_the_missing_install(units_as_installed: list[Path]) -> None:
    completed = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *map(str, units_as_installed)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    expected = ("is not executable: No such file or directory",)  # /opt/agentloop is not installed here
    problems = [
        line
        for line in (completed.stdout + completed.stderr).splitlines()
        if line.strip() and not any(text in line for text in expected)
    ]
    assert not problems, "\n".join(problems)


# -- environment ----------------------------------------------------------------------------------


def test_the_env_example_uses_only_variables_the_project_or_flower_reads() -> None:
    known = project_variables() | flower_variables()
    unknown = set(env_example()) - known
    assert not unknown, f"not read by agentloop or Flower: {sorted(unknown)}"
    assert "FLOWER_UNAUTHENTICATED_API" not in env_example()  # mentioned only to say: never set it


def test_the_env_example_mentions_every_variable_of_celeryconfig() -> None:
    documented = celeryconfig_variables()
    assert len(documented) >= 10
    assert documented <= set(env_example()), sorted(documented - set(env_example()))


def test_celeryconfig_accepts_the_env_example() -> None:
    env = {key: value for key, value in os.environ.items() if key not in env_example()}
    env.update(env_set())
    env["PYTHONPATH"] = str(ROOT)
    code = (
        "from agentloop import celeryconfig as c; "
        "print(c.broker_url.split('@')[-1], c.broker_transport_options['visibility_timeout'], "
        "c.task_time_limit, c.worker_prefetch_multiplier)"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["redis.internal:6379/0", "1260", "960", "1"]


# -- redis -----------------------------------------------------------------------------------------


def test_redis_conf_never_evicts_and_keeps_an_append_only_file() -> None:
    directives = redis_directives()
    assert directives["maxmemory-policy"] == "noeviction"
    assert directives["appendonly"] == "yes"
    assert directives["appendfsync"] == "everysec"
    assert directives["maxmemory"]


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_redis_server_starts_with_the_example_config(tmp_path: Path) -> None:
    import redis
    from ops_support import free_port

    port = free_port()
    process = subprocess.Popen(
        ["redis-server", str(DEPLOY / "redis.conf"), "--port", str(port), "--bind", "127.0.0.1",
         "--dir", str(tmp_path), "--daemonize", "no", "--logfile", str(tmp_path / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        client = redis.Redis(port=port, socket_timeout=2)
        deadline = time.monotonic() + 10
        while True:
            assert process.poll() is None, (tmp_path / "redis.log").read_text()
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not answer"
                time.sleep(0.05)
        settings = {
            key: client.config_get(key)[key] for key in ("maxmemory-policy", "appendonly", "appendfsync")
        }
        assert settings == {"maxmemory-policy": "noeviction", "appendonly": "yes", "appendfsync": "everysec"}
        client.close()
    finally:
        process.terminate()
        process.wait(10)


# -- the guide -------------------------------------------------------------------------------------


def test_the_guide_names_every_example_file() -> None:
    guide = (ROOT / "docs" / "deployment.md").read_text()
    for path in [*DEPLOY.glob("*"), *SERVICE_UNITS]:
        if path.is_file() and not path.name.endswith(".dockerignore"):
            assert path.name in guide, f"docs/deployment.md does not mention {path.name}"

"""Smoke test of the ``engine`` benchmark (``bench/engine_overhead/``): it runs and yields sane numbers.

No timing is asserted: only that every figure is finite and positive.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench_module(name: str) -> ModuleType:
    # ``bench`` is a top-level folder of the checkout, not an installed package:
    # make it importable however pytest was started.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(name)


def _check_side(side: object) -> None:
    for name in ("per_step_us", "min_per_step_us", "max_per_step_us", "cpu_per_step_us"):
        value = getattr(side, name)
        assert isinstance(value, float), (side, name)
        assert math.isfinite(value) and value > 0, (side, name, value)


def test_engine_benchmark_quick_mode_gives_finite_figures(capsys: pytest.CaptureFixture[str]) -> None:
    measure = _bench_module("bench.engine_overhead.measure")
    printing = _bench_module("bench.engine_overhead.report")
    report = measure.run(quick=True)

    assert report.iterations == measure.QUICK_ITERATIONS
    assert report.rounds == measure.QUICK_ROUNDS
    for side in report.sides:
        assert len(side.samples_ns) == report.rounds
        _check_side(side)
    _check_side(report.plain)
    _check_side(report.engine)
    assert math.isfinite(report.engine_vs_plain) and report.engine_vs_plain > 0

    if importlib.util.find_spec("langgraph") is None:
        assert report.langgraph is None
        assert report.langgraph_missing is not None and "pip install" in report.langgraph_missing
        assert report.passed is None
    else:
        assert report.langgraph is not None
        _check_side(report.langgraph)
        ratio = report.langgraph_vs_engine
        assert ratio is not None and math.isfinite(ratio) and ratio > 0
        assert isinstance(report.passed, bool)

    printing.print_report(report)
    text = printing.render(report)
    printed = capsys.readouterr().out
    for out in (printed, text):
        assert "engine/plain" in out
        assert "langgraph/engine" in out


def test_engine_benchmark_without_langgraph_still_reports_the_plain_ratio() -> None:
    measure = _bench_module("bench.engine_overhead.measure")
    printing = _bench_module("bench.engine_overhead.report")
    report = measure.run(iterations=20, rounds=1, include_langgraph=False)

    assert report.langgraph is None and report.passed is None
    assert math.isfinite(report.engine_vs_plain) and report.engine_vs_plain > 0
    assert "NOT CHECKED" in printing.render(report)


def test_bench_command_line_dispatches_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    cli = _bench_module("bench.__main__")
    assert "engine" in cli.BENCHMARKS
    assert cli.main(["--list"]) == 0
    assert "engine" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["no-such-benchmark"])


def test_the_celery_benchmark_is_listed_and_its_own_command_line_parses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = _bench_module("bench.__main__")
    celery_main = _bench_module("bench.celery_overhead.__main__")

    assert cli.main(["--list"]) == 0
    assert "celery" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        celery_main.main(["--help"])
    assert exit_info.value.code == 0
    assert "--ablate" in capsys.readouterr().out

    fixed_tasks = _bench_module("bench.celery_overhead.fixed_tasks")
    with pytest.raises(SystemExit) as exit_info:
        fixed_tasks.main(["--help"])
    assert exit_info.value.code == 0 and "--profile" in capsys.readouterr().out


def test_packing_openai_failure_is_one_line_not_a_traceback() -> None:
    """``bench.packing``'s OpenAI step reports a failed side as NOT RUN with one line of reason
    (at 10,000 runs the local server dropped connections and the benchmark printed tracebacks):
    here the bare script's server is a closed port."""
    import socket
    import subprocess

    packing = _bench_module("bench.packing")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(subprocess.CalledProcessError) as failed:
        packing.bare_openai_once(f"http://127.0.0.1:{port}/v1", 1)
    reason = packing._reason(failed.value)
    assert "\n" not in reason and "Traceback" not in reason
    assert "Connection" in reason, reason
    assert packing.OPENAI_MAX_RUNS <= 200

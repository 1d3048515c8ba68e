"""Benchmark scripts refuse, before any work, arguments that leave no step to time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize(
    ("script", "steps", "untimed"),
    [
        ("bench_anomaly_mode.py", "50", "the 50 warm-up steps left out"),
        ("bench_doctor_overhead.py", "100", "the 100 left out (--skip)"),
        ("bench_health_overhead.py", "100", "the 100 before the steady cost"),
    ],
)
def test_too_few_steps_to_time_is_a_usage_error(script: str, steps: str, untimed: str) -> None:
    # Was "statistics.StatisticsError: no median for empty data", once the steps had run.
    argv = [sys.executable, str(BENCHMARKS / script), "--steps", steps, "--repeats", "1"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.endswith(f"{script}: error: --steps {steps}: give more than {untimed}\n")

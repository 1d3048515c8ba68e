"""Memory the health monitor keeps over a long run: its series, as the steps go by.

Feeds the monitor's per-step path (``begin_step``/``end_step``, a float loss, no model) a
number of cheap steps and reports, at each checkpoint, the bytes its series hold (every array,
its spare capacity included, and the sampled steps noted for the loss checks), the process's
RSS, and the mean time of the steps since the previous checkpoint. At the end: the recorded
host RSS (the script's, the monitor's own series taken off) in quarter medians, which a run
that allocates nothing should read flat, and the findings (none expected).

    python benchmarks/bench_health_memory.py --steps 1000000 --out benchmarks/results/health-memory
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from machine import cpu_model  # benchmarks/machine.py (scripts run from this folder)
from treeqa.health import HealthMonitor, timing
from treeqa.health.monitor import rss_mb


def held_mb(monitor: HealthMonitor) -> float:
    """MB the monitor's series and sampled-step lists hold (``sys.getsizeof`` counts an
    array's allocated capacity, not only its length)."""
    held = sum(sys.getsizeof(values) for values in monitor.series.values())
    for notes in (monitor.chance, monitor.regression):
        held += sys.getsizeof(notes) + sum(sys.getsizeof(n) for n in notes)
    return held / 2**20


def run(steps: int, every: int, checkpoints: list[int]) -> dict[str, Any]:
    monitor = HealthMonitor(every=every, stream=io.StringIO())
    rows: list[dict[str, float]] = []
    rss_before, start, done = rss_mb(), time.perf_counter(), 0
    for checkpoint in checkpoints:
        for _ in range(checkpoint - done):
            monitor.begin_step()
            monitor.end_step(1.0, 1e-3)
        now = time.perf_counter()
        rows.append(
            {
                "step": checkpoint,
                "series_mb": round(held_mb(monitor), 2),
                "rows": len(monitor.series["step"]),
                "rss_growth_mb": round(rss_mb() - rss_before, 1),
                "us_per_step": round((now - start) / (checkpoint - done) * 1e6, 1),
            }
        )
        print(rows[-1], flush=True)
        start, done = time.perf_counter(), checkpoint
    # Read as the checks read it: evenly thinned (code before the thinning has no ``even``).
    even = getattr(monitor, "even", monitor.series.__getitem__)
    medians = timing.quarter_medians(even("rss_mb"), 0)
    result = monitor.finish()
    return {
        "steps": steps,
        "every": every,
        "checkpoints": rows,
        "recorded_rss_quarter_medians_mb": [round(v, 1) for v in medians or []],
        "findings": [f["code"] for f in result["findings"] if f["severity"] != "info"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--out", type=Path, help="write OUT.json")
    args = parser.parse_args()
    if args.steps < 1000:
        parser.error(f"--steps {args.steps}: give at least 1000 (checkpoints at 1/1000 of it)")
    torch.set_num_threads(1)
    checkpoints = sorted({args.steps // 1000, args.steps // 100, args.steps // 10, args.steps})
    checkpoints += [c for c in (args.steps // 4, args.steps // 2) if c not in checkpoints]
    result = run(args.steps, args.every, sorted(checkpoints))
    result["machine"] = {
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Per-step overhead of the health monitor on a clean training run, with and without it.

One process trains the same model through treeqa's ``fit()`` in rotating repeats with the
monitor off, on (default settings), and off again as a second, independent "off" side, so load
drift hits every side alike. Reported: the median per-step wall time of each side (measured
around the whole step, callbacks included), the on/off ratio, the off/off ratio (the noise
floor of this A/B on this machine: with nothing different it should be 1), the ratio of total
wall time (which includes the periodic scans and the profiler window), and the monitor's own
time measured inside its callbacks.

    python benchmarks/bench_health_overhead.py --steps 2000 --repeats 6 --out benchmarks/results/health-overhead
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from machine import cpu_model  # benchmarks/machine.py (scripts run from this folder)
from treeqa.health import HealthMonitor
from treeqa.models.common import Output
from treeqa.train.loop import Callback, TrainConfig, TrainState, fit


class Batch:
    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def to(self, device: torch.device) -> Batch:
        return Batch(self.x.to(device), self.y.to(device))


class Model(nn.Module):
    """A 4-layer MLP classifier: big enough that a step is a few milliseconds on a CPU core."""

    def __init__(self, dim: int):
        super().__init__()
        self.body = nn.Sequential(
            *[m for _ in range(4) for m in (nn.Linear(dim, dim), nn.ReLU())], nn.Linear(dim, 10)
        )

    def forward(self, batch: Batch) -> Output:
        logits = self.body(batch.x)
        return Output(logits, nn.functional.cross_entropy(logits, batch.y))


class StepClock(Callback):
    """Wall time from one step's end to the next: data, compute and every callback."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.last: float | None = None

    def on_step_end(self, state: TrainState, output: Output, batch: Any) -> None:
        now = time.perf_counter()
        if self.last is not None:
            self.times.append(now - self.last)
        self.last = now


class TimedMonitor(HealthMonitor):
    """The default monitor, timing its own per-step callbacks (a load-independent cost)."""

    def __init__(self) -> None:
        super().__init__(stream=io.StringIO())
        self.cost: list[float] = []
        self._begin = 0.0

    def on_batch_start(self, state: TrainState, batch: Any) -> None:
        t = time.perf_counter()
        super().on_batch_start(state, batch)
        self._begin = time.perf_counter() - t

    def on_step_end(self, state: TrainState, output: Output, batch: Any) -> None:
        t = time.perf_counter()
        super().on_step_end(state, output, batch)
        self.cost.append(self._begin + time.perf_counter() - t)


def loss_wrapper_cost(n: int = 20_000) -> float:
    """Seconds added to one ``F.cross_entropy`` call by the monitor's wrapper (unsampled step)."""
    logits, target = torch.randn(64, 10), torch.randint(0, 10, (64,))
    monitor = HealthMonitor(stream=io.StringIO())
    best = {}
    for side in ("off", "on", "off", "on"):
        if side == "on":
            monitor.install_loss_checks()
        t = time.perf_counter()
        for _ in range(n):
            nn.functional.cross_entropy(logits, target)
        best[side] = min(best.get(side, 1e9), (time.perf_counter() - t) / n)
        monitor.uninstall()
    return max(0.0, best["on"] - best["off"])


def series_check_cost(steps: int, repeats: int = 5) -> tuple[float, int]:
    """Seconds for one pass of the monitor's checks over the series of a ``steps``-step CPU run
    (synthetic values, the reference workload read every 4th step, one profiler window), and
    the rows the series hold: filled as a run fills them, thinned each time they reach the
    monitor's bound of rows."""
    rng = random.Random(0)
    monitor = HealthMonitor(stream=io.StringIO())
    monitor.profile.profiled.update({51, 52, 53})
    done = 0
    while done < steps:
        n = min(4096, steps - done)
        for name, values in monitor.series.items():
            if name == "step":
                values.extend(float(s) for s in range(done + 1, done + n + 1))
            elif name == "cuda_mb":
                values.extend(0.0 for _ in range(n))
            elif name == "canary":
                values.extend(rng.random() if (done + i) % 4 == 0 else math.nan for i in range(n))
            else:
                values.extend(rng.random() for _ in range(n))
        done += n
        if len(monitor.series["step"]) >= monitor.thinning.rows:
            monitor._thin()
    start = time.perf_counter()
    for _ in range(repeats):
        monitor._series_checks(steps)
    return (time.perf_counter() - start) / repeats, len(monitor.series["step"])


WARMUP = 10
"""Steps of each run left out of every figure: the first ones pay for allocation."""
STEADY_FROM = 100
"""Step from which the monitor's cost is steady: after the early scans (steps 8, 32) and the
first profiler window."""
COSTS: list[float] = []
STEADY: list[float] = []


def run(with_monitor: bool, steps: int, dim: int, device: str) -> tuple[list[float], float]:
    torch.manual_seed(0)
    data = [Batch(torch.randn(64, dim), torch.randint(0, 10, (64,))) for _ in range(32)]
    model = Model(dim)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    clock = StepClock()
    monitor = TimedMonitor() if with_monitor else None
    callbacks: list[Callback] = [monitor] if monitor is not None else []
    config = TrainConfig(epochs=1, device=device)
    started = time.perf_counter()
    fit(
        model,
        opt,
        lambda e: (data[i % len(data)] for i in range(steps)),
        config,
        callbacks=[*callbacks, clock],
    )
    if monitor is not None:
        COSTS.extend(monitor.cost[WARMUP:])
        STEADY.extend(monitor.cost[STEADY_FROM:])
    return clock.times, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="write OUT.json and OUT.md")
    parser.add_argument(
        "--series-checks",
        action="store_true",
        help="only time one pass of the checks over the series of runs of 2,000-512,000 steps "
        "(thinned as a run thins them)",
    )
    args = parser.parse_args()
    if args.steps <= STEADY_FROM and not args.series_checks:
        parser.error(
            f"--steps {args.steps}: give more than the {STEADY_FROM} before the steady cost"
        )
    torch.set_num_threads(1)
    if args.series_checks:
        for n in (2_000, 8_000, 32_000, 128_000, 512_000):
            cost, rows = series_check_cost(n)
            print(
                f"{n:>7} steps ({rows:>6} rows): {cost * 1e3:7.2f} ms a pass; per step, a pass "
                f"every max(50, steps/32) {cost / max(50, n / 32) * 1e6:5.1f} us"
            )
        return
    run(True, 50, args.dim, args.device)  # warm-up: allocator, kernels, profiler import
    COSTS.clear()
    STEADY.clear()
    load_before = os.getloadavg()
    sides = ("off", "on", "off2")
    per: dict[str, list[float]] = {k: [] for k in sides}
    walls: dict[str, list[float]] = {k: [] for k in sides}
    pair_ratios: dict[str, list[float]] = {"on": [], "off2": []}
    for r in range(args.repeats):
        medians = {}
        for side in sides[r % 3 :] + sides[: r % 3]:  # rotate the order
            times, wall = run(side == "on", args.steps, args.dim, args.device)
            per[side].extend(times[WARMUP:])
            walls[side].append(wall)
            medians[side] = statistics.median(times[WARMUP:])
        for side in pair_ratios:
            pair_ratios[side].append(medians[side] / medians["off"])
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in per.items()}
    wrapper = loss_wrapper_cost()
    own_median = statistics.median(COSTS) + wrapper
    own_mean = statistics.mean(COSTS) + wrapper
    own_steady = statistics.mean(STEADY) + wrapper
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{cpu_model()}, nproc {os.cpu_count()}, torch {torch.get_num_threads()} thread(s), {args.device}",
        "load_average_1m": {"start": round(load_before[0], 2), "end": round(load_after[0], 2)},
        "torch": torch.__version__,
        "command": "python " + " ".join(sys.argv),
        "steps_per_repeat": args.steps,
        "repeats": args.repeats,
        "median_step_ms": {k: round(v * 1e3, 4) for k, v in med.items()},
        "median_step_ratio": round(med["on"] / med["off"], 4),
        "null_ratio_off2_off": round(med["off2"] / med["off"], 4),
        "repeat_ratios": {k: [round(v, 4) for v in vs] for k, vs in pair_ratios.items()},
        "monitor_cost_us": {
            "median_per_step": round(own_median * 1e6, 1),
            "mean_per_step": round(own_mean * 1e6, 1),
            "mean_per_step_from_step_100": round(own_steady * 1e6, 1),
            "loss_wrapper_per_call": round(wrapper * 1e6, 2),
        },
        "monitor_cost_share_of_median_step": {
            "median": round(own_median / med["off"], 5),
            "mean": round(own_mean / med["off"], 5),
            "mean_from_step_100": round(own_steady / med["off"], 5),
        },
        "total_wall_ratio": round(
            statistics.median(walls["on"]) / statistics.median(walls["off"]), 4
        ),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(
            "# Health monitor overhead\n\n"
            f"{result['date']}, {result['machine']}, torch {result['torch']}; 1-minute load "
            f"average {result['load_average_1m']['start']} at the start, "
            f"{result['load_average_1m']['end']} at the end (other jobs share the CPUs)\n\n"
            f"`{result['command']}`\n\n"
            "| | median step (ms) |\n|---|---|\n"
            f"| monitor off | {result['median_step_ms']['off']} |\n| monitor on (default) | {result['median_step_ms']['on']} |\n"
            f"| monitor off, second side (null control) | {result['median_step_ms']['off2']} |\n\n"
            f"Per-step ratio on/off: **{result['median_step_ratio']}**; off/off (noise floor): "
            f"{result['null_ratio_off2_off']}; per repeat on/off {result['repeat_ratios']['on']}, "
            f"off/off {result['repeat_ratios']['off2']}; total wall-time ratio "
            f"(scans and profiler window included): {result['total_wall_ratio']}.\n\n"
            "The monitor's own time, measured inside its callbacks (plus the cross-entropy "
            "wrapper), does not depend on what else the CPUs run: "
            f"median {result['monitor_cost_us']['median_per_step']} us per step "
            f"({result['monitor_cost_share_of_median_step']['median']:.2%} of the median step), "
            f"mean {result['monitor_cost_us']['mean_per_step']} us "
            f"({result['monitor_cost_share_of_median_step']['mean']:.2%}; sampled steps, gc "
            "scans and profiler windows included); mean from step 100 on, past the one-off "
            f"early scans and first profiler window: {result['monitor_cost_us']['mean_per_step_from_step_100']} us "
            f"({result['monitor_cost_share_of_median_step']['mean_from_step_100']:.2%}).\n"
        )


if __name__ == "__main__":
    main()

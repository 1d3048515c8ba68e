"""What autograd's anomaly detection costs a training step (``anomaly-detection-on``'s claim).

The MLP of ``tests/health/scripts/bug_anomaly_detection_on.py`` trains with the mode off and
on, alternately, ``--repeats`` times; each side's median step (after ``WARMUP``, 50, steps) and
their ratio are printed.

    python benchmarks/bench_anomaly_mode.py --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F

from machine import cpu_model  # benchmarks/machine.py (scripts run from this folder)

WARMUP = 50
"""Steps of each side left out of its median: the first ones pay for allocation."""


def median_step_ms(anomaly: bool, steps: int) -> float:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    times = []
    with torch.autograd.set_detect_anomaly(anomaly):
        for _ in range(steps):
            start = time.perf_counter()
            x = torch.randn(32, 20)  # [32, 20]
            loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - start)
    return statistics.median(times[WARMUP:]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--steps", type=int, default=300, help=f"steps of each side, the first {WARMUP} untimed"
    )
    args = parser.parse_args()
    if args.steps <= WARMUP:
        parser.error(f"--steps {args.steps}: give more than the {WARMUP} warm-up steps left out")
    print(f"{cpu_model()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    for _ in range(args.repeats):
        off, on = median_step_ms(False, args.steps), median_step_ms(True, args.steps)
        print(f"median step: off {off:.3f} ms, on {on:.3f} ms, x{on / off:.2f}")


if __name__ == "__main__":
    main()

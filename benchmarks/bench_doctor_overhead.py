"""The doctor's cost per step on a tiny model: a training loop with and without it, side by side.

The training loop is this file run with ``--loop``: a ``Linear(4, 1)`` trained by SGD on a
mean-squared error, batches of 8 (drawn from a ``DataLoader`` with ``--loader``), each step
timed by the script itself from the start of one iteration to the start of the next. Such a
step takes a few hundred microseconds, so what the doctor adds to every step shows. The loop
runs as plain ``python``, under ``treeqa doctor`` with this checkout's code and, with
``--against SRC`` (the ``src`` folder of another checkout), under that code's doctor, the
sides alternated ``--repeats`` times so that each meets the same machine. Prints each run's
median step (steps from ``--skip`` on; the doctor's sampled steps are few and above the
median), its mean step, and each side's ratio to plain python in the same repeat; with
``--against``, also the time each doctor adds to a step over python, one against the other.
On a shared machine those ratios move with its load from run to run; ``--bytecodes`` counts
instead the bytecodes the doctor's own code runs in a step, and its calls, which do not.

    python benchmarks/bench_doctor_overhead.py --steps 3000 --repeats 6 --against ../before/src
    python benchmarks/bench_doctor_overhead.py --bytecodes --against ../before/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


class Bytecodes:
    """A ``sys.settrace`` function counting the bytecodes run and the calls made in the
    doctor's own code (``treeqa/health``): a count that this machine's load does not move."""

    def __init__(self) -> None:
        self.ops, self.calls = 0, 0
        self.ours = os.sep.join(("", "treeqa", "health", ""))

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        if self.ours not in frame.f_code.co_filename:
            return None  # (its own bytecodes are not counted; the calls it makes are seen)
        self.calls += 1
        frame.f_trace_opcodes = True
        return self.local

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        self.ops += event == "opcode"
        return self.local


def loop(steps: int, loader: bool, out: Path, count: bool = False) -> None:
    """The training script: ``steps`` steps of a ``Linear(4, 1)``; each step's seconds to
    ``out`` (``count``: the doctor's bytecodes and calls in each step instead)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y = torch.randn(steps * 8, 4), torch.randn(steps * 8, 1)  # [S*8, 4], [S*8, 1]
    if loader:
        dataset = torch.utils.data.TensorDataset(x, y)
        batches: object = torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True)
    else:
        batches = zip(x.split(8), y.split(8), strict=True)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    times: list[float] = []  # seconds a step (``count``: pairs of bytecodes and calls)
    counter = Bytecodes()
    start = time.perf_counter()
    drawn = iter(batches)  # type: ignore[call-overload]
    while True:
        if count:  # (the draw counted too: a DataLoader's iterator is wrapped)
            counter.ops = counter.calls = 0
            sys.settrace(counter)
        try:
            inputs, targets = next(drawn)
        except StopIteration:
            sys.settrace(None)
            break
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)  # [B, 1] against [B, 1]
        loss.backward()
        optimizer.step()
        if count:
            sys.settrace(None)
            times.append(counter.ops)
            times.append(counter.calls)
            continue
        now = time.perf_counter()
        times.append(now - start)
        start = now
    out.write_text(json.dumps(times))


def one_run(src: Path | None, steps: int, loader: bool, count: bool = False) -> list[float]:
    """One run's step times (``count``: bytecodes and calls, alternately): plain python
    (``src`` None) or the doctor with the code in ``src``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        script = [str(HERE), "--loop", "--steps", str(steps), "--times", str(out)]
        script += ["--loader"] if loader else []
        script += ["--count"] if count else []
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        if src is None:
            cmd = [sys.executable, *script]
        else:
            report = str(Path(tmp) / "report.json")
            cmd = [sys.executable, "-m", "treeqa", "doctor", "--json", report, "--", "python"]
            cmd += script
            env["PYTHONPATH"] = str(src)
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        return [float(t) for t in json.loads(out.read_text())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--skip", type=int, default=100, help="first steps left out (warm-up)")
    parser.add_argument("--loader", action="store_true", help="batches from a DataLoader")
    parser.add_argument("--against", type=Path, help="another checkout's src folder")
    parser.add_argument(
        "--bytecodes",
        action="store_true",
        help="count the doctor's bytecodes and calls per step instead of timing (one run each)",
    )
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--times", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        loop(args.steps, args.loader, args.times, args.count)
        return
    if args.steps <= args.skip:
        parser.error(f"--steps {args.steps}: give more than the {args.skip} left out (--skip)")
    sides: dict[str, Path | None] = {"python": None, "doctor": HERE.parent.parent / "src"}
    if args.against is not None:
        sides["doctor (against)"] = args.against.resolve()
    if args.bytecodes:  # the median step: neither a sampled step nor one that reads the clock
        for name, src in list(sides.items())[1:]:
            counted = one_run(src, args.steps, args.loader, count=True)
            ops, calls = counted[2 * args.skip :: 2], counted[2 * args.skip + 1 :: 2]
            print(
                f"{name:<17} per step, median: {statistics.median(ops):.0f} bytecodes, "
                f"{statistics.median(calls):.0f} calls in treeqa.health"
            )
        return
    medians: dict[str, list[float]] = {name: [] for name in sides}  # each repeat's, in us
    for repeat in range(1, args.repeats + 1):
        for name, src in sides.items():
            started = time.perf_counter()
            kept = one_run(src, args.steps, args.loader)[args.skip :]
            median_us, mean_us = 1e6 * statistics.median(kept), 1e6 * statistics.mean(kept)
            medians[name].append(median_us)
            print(
                f"{repeat} {name:<17} median step {median_us:7.1f} us, mean {mean_us:7.1f} us, "
                f"{median_us / medians['python'][-1]:.2f}x python "
                f"(run {time.perf_counter() - started:.1f} s)",
                flush=True,
            )
    plain = medians["python"]
    for name, each in medians.items():
        ratios = [m / p for m, p in zip(each, plain, strict=True)]
        print(
            f"median {name:<17} {statistics.median(each):7.1f} us, "
            f"{statistics.median(ratios):.2f}x python (per repeat {min(ratios):.2f}-{max(ratios):.2f})"
        )
    if args.against is not None:  # the two codes' added time, repeat by repeat
        added = [(d - p) / (a - p) for p, d, a in zip(*medians.values(), strict=True) if a > p]
        print(
            f"time the doctor adds / the time the doctor (against) adds: median "
            f"{statistics.median(added):.2f} (per repeat {min(added):.2f}-{max(added):.2f})"
        )


if __name__ == "__main__":
    main()

"""Data-parallel training on the CPU cores of one machine against one process using all of them.

Trains the same config for ``--epochs`` on SST, alternately (``--rounds`` times):
  one process with ``--procs`` torch threads and batch ``procs x B``, and
  ``torchrun`` with ``--procs`` processes of one thread each and batch ``B`` per process,
so both make the same number of steps on the same global batch. Reported: the last epoch's
wall time of each run (from ``metrics.jsonl``, dev evaluation included: process 0 evaluates
alone) and the ratio. Example:

    python benchmarks/bench_ddp.py --data "$TREEQA_DATA/sst" \
        --vectors "$TREEQA_DATA/vectors/glove.6B.50d.sst-squad-subset.txt.gz"
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from bench_tree import ROOT, default_data  # benchmarks/ (run from this folder)
from machine import cpu_model


def run(procs: int, batch: int, args: argparse.Namespace, out: Path) -> float:
    """Seconds of the last epoch of one training run."""
    train = ["-m", "treeqa", "train", "sentiment", "--config", args.config, "--data", args.data]
    train += ["--vectors", args.vectors] if args.vectors else []
    train += ["--epochs", str(args.epochs), "--batch_size", str(batch), "--health", "off"]
    train += ["--out", str(out)]
    env = dict(os.environ)
    if procs == 1:
        env["OMP_NUM_THREADS"] = str(args.procs)
        command = [sys.executable, *train]
    else:
        env["OMP_NUM_THREADS"] = "1"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += ["--nproc-per-node", str(procs), *train]
    subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return float([x for x in lines if "epoch_time_s" in x][-1]["epoch_time_s"])


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=default_data())
    parser.add_argument("--vectors", default="")
    parser.add_argument("--config", default=str(ROOT / "configs" / "tree_lstm_fine.toml"))
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=25, help="per process")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ddp-cpu"))
    args = parser.parse_args()
    one: list[float] = []
    many: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            one.append(run(1, args.procs * args.batch, args, Path(tmp) / f"one{r}"))
            many.append(run(args.procs, args.batch, args, Path(tmp) / f"many{r}"))
            print(
                f"round {r + 1}: one process {one[-1]:.1f} s, {args.procs} processes {many[-1]:.1f} s"
            )
    result = {
        "one_process_s": one,
        "processes_s": many,
        "ratio": statistics.median(one) / statistics.median(many),
        "setup": {
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu_model(),
            "nproc": os.cpu_count(),
            "torch": torch.__version__,
            "load_average": os.getloadavg()[0],
            "args": {k: v for k, v in vars(args).items() if k != "out"},
        },
    }
    write(result, Path(args.out))
    return result


def write(r: dict[str, Any], out: Path) -> None:
    out.with_suffix(".json").write_text(json.dumps(r, indent=1) + "\n", encoding="utf-8")
    a, s = r["setup"]["args"], r["setup"]
    lines = [
        "# Data-parallel training on one machine's CPU cores",
        "",
        f"{s['date']}, {s['cpu']}, {s['nproc']} CPUs, torch {s['torch']}; load average"
        f" {s['load_average']:.2f} at the end. `python benchmarks/bench_ddp.py` with"
        f" `{Path(a['config']).name}`, {a['epochs']} epochs per run, {a['rounds']} rounds"
        " run alternately; the last epoch's wall time (dev evaluation included).",
        "",
        "| run | global batch | last epoch, s (each round) | median |",
        "| --- | ---: | --- | ---: |",
        f"| one process, {a['procs']} threads, batch {a['procs'] * a['batch']} |"
        f" {a['procs'] * a['batch']} | {', '.join(f'{x:.1f}' for x in r['one_process_s'])} |"
        f" {statistics.median(r['one_process_s']):.1f} |",
        f"| torchrun, {a['procs']} processes x 1 thread, batch {a['batch']} each |"
        f" {a['procs'] * a['batch']} | {', '.join(f'{x:.1f}' for x in r['processes_s'])} |"
        f" {statistics.median(r['processes_s']):.1f} |",
        "",
        f"Speed-up of the processes over the one process: **{r['ratio']:.2f}x**.",
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()

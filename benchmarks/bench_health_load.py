"""Findings the health monitor makes on a clean training run while other processes load the CPU.

Each run trains the demo Tree-LSTM (`make demo`'s second model, embedded treebank, one epoch
by default) with the monitor on, while ``--busy`` processes spin on the same cores. A clean run
should get no warning: whatever warning-level findings it gets are false alarms caused by the
load. With ``--against SRC`` (the ``src`` folder of another checkout of treeqa) the runs
alternate between that code and this one, so both sides meet the same load.

    python benchmarks/bench_health_load.py --busy 4 --runs 6 --against ../before/src \
        --out benchmarks/results/health-load
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
THIS_SRC = HERE.parent / "src"
TRAIN = ["-m", "treeqa", "train", "sentiment", "--model", "tree_lstm"]
TRAIN += ["--embed_dim", "50", "--hidden_dim", "50"]


def spin() -> None:
    while True:
        pass


def one_run(src: Path, epochs: int, out: Path) -> dict[str, Any]:
    """Train once with the code in ``src``; its warning-level findings and hot-op's evidence."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    started = time.perf_counter()
    cmd = [sys.executable, *TRAIN, "--epochs", str(epochs), "--out", str(out)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    report = json.loads((out / "health.json").read_text())
    hot = [f for f in report["findings"] if f["code"] == "hot-op"]
    return {
        "wall_s": round(time.perf_counter() - started, 1),
        "steps": len(report["series"]["step"]),
        "warnings": sorted(f["code"] for f in report["findings"] if f["severity"] != "info"),
        "hot_op": [
            {
                "severity": f["severity"],
                "family": f["evidence"]["family"],
                "share": f["evidence"]["share"],
                "ms_per_step": f["evidence"]["ms_per_step"],
                "cpu_wait_ms_per_step": f["evidence"].get("cpu_wait_ms_per_step"),
            }
            for f in hot
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=4, help="spinning processes (default 4)")
    parser.add_argument("--runs", type=int, default=6, help="runs of each side (default 6)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs of each run (default 1)")
    parser.add_argument("--against", type=Path, help="another checkout's src/, run alternately")
    parser.add_argument("--out", type=Path, help="write OUT.json")
    args = parser.parse_args()
    sides = {"this": THIS_SRC} | ({"against": args.against.resolve()} if args.against else {})
    busy = [mp.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(args.runs):
                for name, src in sides.items() if run % 2 == 0 else reversed(sides.items()):
                    row = {"side": name, "run": run + 1}
                    row |= one_run(src, args.epochs, Path(tmp) / f"{name}-{run}")
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        for p in busy:
            p.terminate()
    for name in sides:
        mine = [r for r in rows if r["side"] == name]
        flagged = sum(bool(r["warnings"]) for r in mine)
        counts: dict[str, int] = {}
        for r in mine:
            for code in r["warnings"]:
                counts[code] = counts.get(code, 0) + 1
        print(f"{name}: {flagged} of {len(mine)} clean runs got a warning; by code: {counts}")
    if args.out:
        meta = {"busy": args.busy, "epochs": args.epochs, "cpus": os.cpu_count()}
        args.out.with_suffix(".json").write_text(json.dumps({**meta, "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

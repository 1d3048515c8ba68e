"""Memory over a long sentiment run: RSS and live Python objects at the end of every epoch.

Trains one model on the embedded demo treebank (or ``--data DIR``) with the health monitor on,
and after each epoch collects garbage and prints the process's RSS and the number of objects
the garbage collector tracks. A run whose memory is flat holds both steady after the first
epochs (the allocator's pools fill up early); anything kept per step or per epoch shows as a
steady climb in objects. The last line compares the second half's first and last epochs.

    python benchmarks/bench_steadiness.py --model tree_lstm --epochs 30
    python benchmarks/bench_steadiness.py --model tree_gru --epochs 15 --json
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from treeqa.health.monitor import rss_mb
from treeqa.recipes import sentiment
from treeqa.train.loop import Callback


class Readings(Callback):
    """RSS (MB) and gc-tracked objects after each epoch."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def on_epoch_end(self, state: Any, metrics: Any) -> None:
        gc.collect()
        row = {"epoch": state.epoch, "rss_mb": round(rss_mb(), 1), "objects": len(gc.get_objects())}
        self.rows.append(row)
        print(f"epoch {row['epoch']:3d}  rss {row['rss_mb']:7.1f} MB  objects {row['objects']:,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tree_lstm", help="tree_lstm, childsum or tree_gru")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--data", default="", help="an SST folder (default: the demo treebank)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    raw = {
        "model": {"name": args.model},
        "train": {"epochs": args.epochs, "health": "on"},
        "data": {"path": args.data},
    }
    readings = Readings()
    with tempfile.TemporaryDirectory() as out:
        config = sentiment.resolve_config(raw, [])
        sentiment.train(config, Path(out) / "run", extra_callbacks=[readings])
    half = readings.rows[len(readings.rows) // 2 :]
    first, last = half[0], half[-1]
    summary = {
        "model": args.model,
        "epochs": args.epochs,
        "rss_mb": [first["rss_mb"], last["rss_mb"]],
        "objects": [first["objects"], last["objects"]],
        "epochs_compared": [first["epoch"], last["epoch"]],
    }
    if args.json:
        print(json.dumps({**summary, "rows": readings.rows}, sort_keys=True))
        return
    print(
        f"epochs {first['epoch']} -> {last['epoch']}: rss {first['rss_mb']} -> {last['rss_mb']} "
        f"MB, objects {first['objects']:,} -> {last['objects']:,}"
    )


if __name__ == "__main__":
    main()

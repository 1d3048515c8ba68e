"""Tai et al.'s per-tree L2 strength on our node-mean loss: the labelled nodes per train sentence
of each config's task, and how far a batch's own count is from that mean.

Their code (sentiment/TreeLSTMSentiment.lua, ``train``) sums the loss over a tree's labelled
nodes, averages over the batch's trees, and adds ``reg * params`` (1e-4) to that gradient once
per batch. Our loss is the mean over the batch's n labelled nodes, 1 / (n / B) of theirs, so the
same strength is 1e-4 / (n / B); the configs write it with the mean of n / B over train, which
a batch's own count misses by the spread printed here.

    python benchmarks/weight_decay_nodes.py --data "$TREEQA_DATA/sst" \\
        --configs configs/tree_lstm_fine.toml configs/tree_lstm_binary.toml
    python benchmarks/weight_decay_nodes.py --data runs/data/sst-dep \\
        --configs configs/childsum_dep_fine.toml configs/childsum_dep_binary.toml
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

import numpy as np

from treeqa.data.batching import batches
from treeqa.data.sst import UNLABELLED, load_split, targets, task_view

STRENGTH = 1e-4  # Tai et al. 5.3: "per-minibatch L2 regularization strength of 1e-4"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="folder of train.txt/.jsonl")
    parser.add_argument("--configs", type=Path, nargs="+", required=True)
    parser.add_argument("--batch-size", type=int, default=25)
    parser.add_argument("--seeds", type=int, default=3, help="epoch orders (shuffles) counted")
    args = parser.parse_args()
    trees = load_split(args.data, "train")
    print(f"{args.data}/train, batch {args.batch_size}, {args.seeds} shuffles")
    print(
        "config                    task     sentences  nodes/sent  1e-4/that  config wd   off"
        "    |batch n/B / mean - 1|: median p95"
    )
    for path in args.configs:
        config = tomllib.loads(path.read_text(encoding="utf-8"))
        task = config.get("data", {}).get("task", "fine")
        wd = float(config["train"]["weight_decay"])
        view = task_view(trees, task)
        nodes = np.array([(targets(t.labels, task) != UNLABELLED).sum() for t in view])  # [S]
        mean = nodes.mean()
        spread = []
        for seed in range(args.seeds):
            groups = batches(list(range(len(nodes))), args.batch_size, True, seed).groups  # type: ignore[arg-type]
            spread += [abs(nodes[g].mean() / mean - 1) for g in groups]
        print(
            f"{path.stem:25} {task:8} {len(view):9d}  {mean:10.3f}  {STRENGTH / mean:9.4g}"
            f"  {wd:9.4g}  {wd * mean / STRENGTH - 1:+5.1%}"
            f"    {np.median(spread):6.1%} {np.percentile(spread, 95):6.1%}"
        )


if __name__ == "__main__":
    main()

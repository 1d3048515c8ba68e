"""How far a torchrun step's weighting of SST nodes is from one mean over the global batch.

Under torchrun each of P processes takes the mean loss over the labelled nodes of its own batch
and DistributedDataParallel averages the P gradients, so a node of process p weighs
1 / (P * n_p), where one mean over the global batch would weigh it 1 / (n_1 + ... + n_P). This
counts, over every node of SST train in the epoch order ``fit()`` uses (``batching.batches``,
rounds of P batches as ``distributed.shard`` deals them), how far the first weight is from the
second: |(n_1 + ... + n_P) / (P * n_p) - 1|, as a distribution over nodes.

    python benchmarks/ddp_node_weights.py                      # fine and binary, P = 2
    python benchmarks/ddp_node_weights.py --processes 4 --json

Data comes from ``--sst``, else ``$TREEQA_DATA/sst``, else ``../shared/data/sst``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from treeqa.data.batching import batches
from treeqa.data.sst import UNLABELLED, load_split, targets, task_view

DATA = Path(
    os.environ.get("TREEQA_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
)


def deviations(nodes: np.ndarray, batch_size: int, processes: int, seed: int) -> np.ndarray:
    """|pooled weight ratio - 1| of every node trained on in one epoch. ``nodes``: [N] labelled
    nodes per sentence."""
    groups = batches(list(range(len(nodes))), batch_size, True, seed).groups  # type: ignore[arg-type]
    out = []
    for r in range(len(groups) // processes):  # a last, incomplete round is dropped
        counts = np.array([nodes[g].sum() for g in groups[r * processes : (r + 1) * processes]])
        ratio = counts.sum() / (processes * counts)  # [P]
        out.append(np.repeat(np.abs(ratio - 1), counts))
    return np.concatenate(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sst", type=Path, default=DATA / "sst")
    parser.add_argument("--batch-size", type=int, default=25)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=3, help="epoch orders (shuffles) counted")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = load_split(args.sst, "train")
    result = {}
    for task in ("fine", "binary"):
        view = task_view(trees, task)
        nodes = np.array([(targets(t.labels, task) != UNLABELLED).sum() for t in view])
        d = np.concatenate(
            [deviations(nodes, args.batch_size, args.processes, s) for s in range(args.seeds)]
        )
        result[task] = {
            "sentences": len(view),
            "median": round(float(np.median(d)), 4),
            "p95": round(float(np.percentile(d, 95)), 4),
            "max": round(float(d.max()), 4),
        }
    setting = {"batch_size": args.batch_size, "processes": args.processes, "seeds": args.seeds}
    if args.json:
        print(json.dumps({**setting, **result}, sort_keys=True))
        return
    print(f"SST train, batch {args.batch_size}, {args.processes} processes, {args.seeds} shuffles")
    print("task     sentences  median    p95     max   (|node weight / pooled weight - 1|)")
    for task, r in result.items():
        print(f"{task:8} {r['sentences']:9d}  {r['median']:6.1%}  {r['p95']:6.1%}  {r['max']:6.1%}")


if __name__ == "__main__":
    main()

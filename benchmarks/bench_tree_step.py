"""Where a level-batched Tree-LSTM training step goes, on one CPU thread.

Measures, on the first ``--sentences`` SST train sentences at ``--batch``:
  1. CPU ms per training step at the paper's sizes (E = 300, D = 150) and with E = D = 8, whose
     matmuls cost next to nothing: the second is the fixed cost per level and per step;
  2. the matmul operators' share of a step at the paper's sizes (``torch.profiler``);
  3. one inner-node matmul, [L, 2D] x [2D, 5D], at several level sizes L.
Results go to ``benchmarks/results/tree-step.md`` and ``.json``. Example:

    python benchmarks/bench_tree_step.py --data "$TREEQA_DATA/sst"
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.profiler import profile

from bench_tree import ROOT, default_data, train_epoch  # benchmarks/ (run from this folder)
from machine import cpu_model
from treeqa.data.batching import collate, encode
from treeqa.data.sst import load_split
from treeqa.data.vocab import Vocab
from treeqa.models import SENTIMENT_MODELS
from treeqa.train.loop import TrainConfig
from treeqa.train.optim import build_optimizer

MATMULS = ("aten::mm", "aten::addmm")


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=default_data())
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tree-step"))
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    torch.set_num_threads(1)
    trees = load_split(args.data, "train")
    vocab = Vocab.build(w for t in trees for w in t.leaves)
    encoded = [encode(t, vocab, "fine") for t in trees[: args.sentences]]
    batches = [collate(encoded[s : s + args.batch]) for s in range(0, len(encoded), args.batch)]
    config_cls, model_cls = SENTIMENT_MODELS["tree_lstm"]
    result: dict[str, Any] = {"steps": len(batches), "batch": args.batch}

    for name, e, d in (("paper", 300, 150), ("tiny", 8, 8)):
        torch.manual_seed(0)
        model = model_cls(config_cls(embed_dim=e, hidden_dim=d, num_classes=5), len(vocab))
        opt = build_optimizer(model, TrainConfig(lr=0.05, emb_lr=0.005, weight_decay=2.7e-6))

        train_epoch(model, opt, batches)  # warm-up
        seconds = train_epoch(model, opt, batches).cpu
        result[f"{name}_ms_per_step"] = seconds / len(batches) * 1e3
        if name == "paper":
            with profile() as prof:
                train_epoch(model, opt, batches)
            ops = {a.key: a.self_cpu_time_total for a in prof.key_averages()}
            result["matmul_share"] = sum(ops.get(k, 0.0) for k in MATMULS) / sum(ops.values())

    result["matmul_us"] = {}
    for rows in (8, 25, 64, 200):
        x, w, b = torch.randn(rows, 300), torch.randn(750, 300), torch.randn(750)
        for _ in range(20):
            torch.addmm(b, x, w.t())
        n = 500
        start = time.perf_counter()
        for _ in range(n):
            torch.addmm(b, x, w.t())
        seconds = (time.perf_counter() - start) / n
        result["matmul_us"][rows] = {
            "us": seconds * 1e6,
            "gflops": 2 * rows * 300 * 750 / seconds / 1e9,
        }
    result["setup"] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "command": "python benchmarks/bench_tree_step.py",
    }
    write(result, Path(args.out))
    return result


def write(r: dict[str, Any], out: Path) -> None:
    out.with_suffix(".json").write_text(json.dumps(r, indent=1) + "\n", encoding="utf-8")
    fixed = r["tiny_ms_per_step"] / r["paper_ms_per_step"]
    lines = [
        "# Tree-LSTM training step on one CPU thread: where the time goes",
        "",
        f"{r['setup']['date']}, {r['setup']['cpu']}, torch {r['setup']['torch']}, one thread;"
        f" `{r['setup']['command']}`; {r['steps']} steps at batch {r['batch']}, CPU time.",
        "",
        f"- E = 300, D = 150: **{r['paper_ms_per_step']:.1f} ms per step**; matmul operators"
        f" (`aten::mm`, `aten::addmm`) take **{100 * r['matmul_share']:.0f}%** of it (profiler).",
        f"- E = D = 8 (matmuls nearly free): **{r['tiny_ms_per_step']:.1f} ms per step**, i.e."
        f" ~{100 * fixed:.0f}% of a step is a fixed cost (per level and per step), whatever the widths.",
        "- One inner-node matmul `[L, 300] x [300, 750]` (addmm):",
        "",
        "| L (nodes in a level) | us | GFLOP/s |",
        "| ---: | ---: | ---: |",
        *(f"| {rows} | {m['us']:.0f} | {m['gflops']:.0f} |" for rows, m in r["matmul_us"].items()),
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()

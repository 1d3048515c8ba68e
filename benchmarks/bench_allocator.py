"""Training speed with glibc's malloc as it comes and with freed memory kept, side by side.

A training step frees and allocates again the same large buffers each step. glibc serves an
allocation above its mmap threshold (128 KiB at start, raised by each freed mmap up to 32 MiB)
with a fresh ``mmap`` and gives the top of its heap back once 128 KiB of it is free, so a step
can fault the same pages in again. "kept" runs with ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` at 1 GiB: malloc reuses what it has and the process keeps its peak
footprint (what preloading jemalloc or tcmalloc, common advice for CPU PyTorch, also buys).

Each measurement is a fresh child process (the setting is read at start), and the two
settings alternate pair by pair (off-on, on-off, ...) so that a host whose speed
drifts during the run weighs on both alike. Workloads, one CPU thread each:

- ``tree25`` / ``tree256``: Tree-LSTM at the paper's sizes (E=300, D=150, Adagrad) on the first
  ``--sentences`` SST train sentences at batch 25 / 256: one warm-up epoch, one timed epoch;
- ``qanet``: the reduced CPU QANet (``configs/qanet_cpu_small.toml``'s model), synthetic
  batches of 16 at context 400, question 50 (as ``bench_qanet.py``), Adam: 1 warm-up, 4 timed steps.

Reported per workload and setting: CPU ms per step (median over pairs), minor page faults per
step, peak RSS; and the ratio off/on of the CPU times. Results go to
``benchmarks/results/allocator.md`` and ``.json``. Example:

    python benchmarks/bench_allocator.py --data "$TREEQA_DATA/sst" --pairs 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from bench_tree import ROOT, default_data, train_epoch  # benchmarks/ (run from this folder)
from machine import cpu_model

WORKLOADS = ("tree25", "tree256", "qanet")
KEEP = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def run_tree(batch: int, data: str, sentences: int) -> tuple[int, Any]:
    """(steps, the timed epoch's function) for the Tree-LSTM at ``batch``."""
    from treeqa.data.batching import collate, encode
    from treeqa.data.sst import load_split
    from treeqa.data.vocab import Vocab
    from treeqa.models import SENTIMENT_MODELS
    from treeqa.train.loop import TrainConfig
    from treeqa.train.optim import build_optimizer

    trees = load_split(data, "train")
    vocab = Vocab.build(w for t in trees for w in t.leaves)
    encoded = [encode(t, vocab, "fine") for t in trees[:sentences]]
    batches = [collate(encoded[s : s + batch]) for s in range(0, len(encoded), batch)]
    config_cls, model_cls = SENTIMENT_MODELS["tree_lstm"]
    torch.manual_seed(0)
    model = model_cls(config_cls(embed_dim=300, hidden_dim=150, num_classes=5), len(vocab))
    opt = build_optimizer(model, TrainConfig(lr=0.05, emb_lr=0.1, weight_decay=1e-4))
    train_epoch(model, opt, batches)  # warm-up
    return len(batches), lambda: train_epoch(model, opt, batches)


def run_qanet() -> tuple[int, Any]:
    """(steps, the timed steps' function) for the reduced QANet, as ``bench_qanet`` trains it."""
    from bench_qanet import model_config, synthetic_batch
    from treeqa.models.qanet import QANet

    args = argparse.Namespace(
        batch=16, context=400, question=50, chars=16, attention_dropout=None,
        model_config=str(ROOT / "configs" / "qanet_cpu_small.toml"),
    )  # fmt: skip
    torch.manual_seed(0)
    model = QANet(model_config(args), 20_000, 256, torch.randn(20_000, 300))
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    batch = synthetic_batch(args, 20_000, 256)
    model.train()

    def steps(n: int) -> None:
        for _ in range(n):
            loss = model(batch).loss
            assert loss is not None
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()

    steps(1)  # warm-up
    return 4, lambda: steps(4)


def child(workload: str, data: str, sentences: int) -> dict[str, Any]:
    """One measurement in this process."""
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    torch.set_num_threads(1)
    if workload == "qanet":
        steps, timed = run_qanet()
    else:
        steps, timed = run_tree(int(workload.removeprefix("tree")), data, sentences)
    before, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    timed()
    after, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time() - cpu
    return {
        "cpu_ms_per_step": cpu / steps * 1e3,
        "faults_per_step": (after.ru_minflt - before.ru_minflt) / steps,
        "peak_rss_mib": after.ru_maxrss / 1024,
    }


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=default_data(), help="SST directory")
    parser.add_argument("--sentences", type=int, default=2560, help="SST train sentences")
    parser.add_argument("--pairs", type=int, default=3, help="off/on pairs per workload")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "allocator"))
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.data, args.sentences)))
        return {}
    result: dict[str, Any] = {"workloads": {}}
    for workload in args.workloads.split(","):
        runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
        for pair in range(args.pairs):
            order = ("off", "on") if pair % 2 == 0 else ("on", "off")
            for setting in order:
                command = [sys.executable, __file__, "--child", workload, "--data", args.data,
                           "--sentences", str(args.sentences)]  # fmt: skip
                env = {k: v for k, v in os.environ.items() if k not in KEEP}
                env |= KEEP if setting == "on" else {}
                run = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
                out = run.stdout
                runs[setting].append(json.loads(out.strip().splitlines()[-1]))
                print(workload, setting, runs[setting][-1], file=sys.stderr)
        summary = {
            setting: {
                key: statistics.median(r[key] for r in rs)
                for key in ("cpu_ms_per_step", "faults_per_step", "peak_rss_mib")
            }
            for setting, rs in runs.items()
        }
        summary["ratio_off_on"] = [
            off["cpu_ms_per_step"] / on["cpu_ms_per_step"]
            for off, on in zip(runs["off"], runs["on"], strict=True)
        ]
        summary["runs"] = runs
        result["workloads"][workload] = summary
    result["setup"] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "command": "python benchmarks/bench_allocator.py " + " ".join(sys.argv[1:]),
    }
    write(result, Path(args.out))
    return result


def write(r: dict[str, Any], out: Path) -> None:
    out.with_suffix(".json").write_text(json.dumps(r, indent=1) + "\n")
    s = r["setup"]
    lines = [
        "# Training with glibc's malloc as it comes (off) and with freed memory kept (on)",
        "",
        f"{s['date']}, {s['cpu']}, torch {s['torch']}, one thread per process;"
        f" `{s['command']}`. Medians over alternated pairs of fresh processes.",
        "",
        "| workload | CPU ms/step off | on | off/on per pair | page faults/step off | on"
        " | peak RSS MiB off | on |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for name, w in r["workloads"].items():
        off, on = w["off"], w["on"]
        ratios = ", ".join(f"{x:.2f}" for x in w["ratio_off_on"])
        lines.append(
            f"| {name} | {off['cpu_ms_per_step']:.1f} | {on['cpu_ms_per_step']:.1f} | {ratios}"
            f" | {off['faults_per_step']:.0f} | {on['faults_per_step']:.0f}"
            f" | {off['peak_rss_mib']:.0f} | {on['peak_rss_mib']:.0f} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Speed of the level-batched tree models against their recursive references, on SST train.

One run measures, with the same model and weights side by side:
  1. inference: level-batched (batch 256) vs the recursive reference (one node at a time) in
     sentences/s, and their ratio;
  2. training steps: level-batched at batch 25 vs the reference one sentence at a time;
  3. one training epoch at batch 25 and one at batch 256 (Adagrad, as in the paper configs);
  4. epoch-time drift over ``--drift-epochs`` epochs (last / first, and the medians of the
     last and first three), in wall and CPU seconds and divided by a host-speed probe;
  5. peak resident memory.
Results go to ``benchmarks/results/tree-<model>.md`` and ``.json`` (``tree-<model>-dep.*``
for dependency-parsed SST) with the date, the machine and the command. Example:

    python benchmarks/bench_tree.py --model tree_lstm --data "$TREEQA_DATA/sst"
    python benchmarks/bench_tree.py --model tree_gru --data DEP_DIR   # sst-dependency output
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shlex
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from machine import cpu_model  # benchmarks/machine.py (scripts run from this folder)
from treeqa.data.batching import EncodedTree, TreeBatch, batches, collate, encode
from treeqa.data.dependency import DependencyTree
from treeqa.data.sst import load_split
from treeqa.data.vocab import Vocab
from treeqa.models import SENTIMENT_MODELS
from treeqa.models.reference import reference_forward
from treeqa.train.loop import TrainConfig
from treeqa.train.optim import build_optimizer

ROOT = Path(__file__).resolve().parent.parent


def default_data() -> str:
    base = os.environ.get("TREEQA_DATA")
    return str(Path(base) / "sst") if base else str(ROOT.parent / "shared" / "data" / "sst")


DEVICE = torch.device("cpu")
"""Where the models run (--device); on a GPU every timing waits for its queued work."""


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


class Timing(NamedTuple):
    """Wall-clock seconds, and this process's CPU seconds (what the same work would take on
    idle cores with one torch thread, when other jobs share the machine)."""

    wall: float
    cpu: float

    @classmethod
    def start(cls) -> Timing:
        sync()
        return cls(time.perf_counter(), time.process_time())

    def since(self) -> Timing:
        sync()
        return Timing(time.perf_counter() - self.wall, time.process_time() - self.cpu)


PROBE = (
    torch.linspace(-1, 1, 256 * 300).view(256, 300),
    torch.linspace(-1, 1, 300 * 750).view(300, 750),
)


def host_probe() -> float:
    """Seconds for a fixed CPU workload (ten [256, 300] x [300, 750] matmuls and tanh, ~20 ms):
    how fast the host runs right now. 1.0 on a GPU, whose speed other host jobs do not set."""
    if DEVICE.type != "cpu":
        return 1.0
    a, w = PROBE
    start = time.perf_counter()
    for _ in range(10):
        torch.tanh(a @ w)
    return time.perf_counter() - start


def collated(trees: Sequence[EncodedTree], batch_size: int) -> list[TreeBatch]:
    """The trees in order, collated once up front and moved to the device."""
    return [b.to(DEVICE) for b in batches(trees, batch_size, shuffle=False)]


def rates(n: int, t: Timing) -> dict[str, float]:
    return {
        "seconds": t.wall,
        "cpu_seconds": t.cpu,
        "sentences_per_s": n / max(t.wall, 1e-9),
        "sentences_per_cpu_s": n / max(t.cpu, 1e-9),
    }


def train_epoch(
    model: torch.nn.Module, opt: torch.optim.Optimizer, data: Sequence[TreeBatch]
) -> Timing:
    """Seconds for one pass of optimiser steps over pre-collated batches."""
    model.train()
    start = Timing.start()
    for batch in data:
        out = model(batch)
        assert out.loss is not None
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
    return start.since()


def inference(model: torch.nn.Module, trees: Sequence[EncodedTree], batch_size: int) -> Timing:
    model.eval()
    start = Timing.start()
    with torch.no_grad():
        for batch in batches(trees, batch_size, shuffle=False):
            model(batch.to(DEVICE))
    return start.since()


def reference_inference(model: torch.nn.Module, trees: Sequence[EncodedTree]) -> Timing:
    model.eval()
    start = Timing.start()
    with torch.no_grad():
        for tree in trees:
            reference_forward(model, collate([tree]).to(DEVICE))
    return start.since()


def reference_training(
    model: torch.nn.Module, opt: torch.optim.Optimizer, trees: Sequence[EncodedTree]
) -> Timing:
    """One optimiser step per sentence, as the original code ran."""
    model.train()
    start = Timing.start()
    for tree in trees:
        out = reference_forward(model, collate([tree]).to(DEVICE))
        assert out.loss is not None
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
    return start.since()


def side_by_side(batched: dict[str, float], reference: dict[str, float]) -> dict[str, Any]:
    return {
        "batched": batched,
        "reference": reference,
        "ratio": batched["sentences_per_s"] / reference["sentences_per_s"],
        "ratio_cpu": batched["sentences_per_cpu_s"] / reference["sentences_per_cpu_s"],
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default=default_data(), help="SST directory (default: $TREEQA_DATA/sst)"
    )
    parser.add_argument(
        "--model", default="tree_lstm", choices=["tree_lstm", "childsum", "tree_gru"]
    )
    parser.add_argument("--task", default="fine", choices=["fine", "binary"])
    parser.add_argument(
        "--embed-dim", type=int, default=300, help="word vector size (300 as in the paper)"
    )
    parser.add_argument("--hidden-dim", type=int, default=150)
    parser.add_argument(
        "--reference-sentences",
        type=int,
        default=200,
        help="train sentences timed for the reference",
    )
    parser.add_argument("--drift-epochs", type=int, default=20)
    parser.add_argument("--drift-batch", type=int, default=256)
    parser.add_argument(
        "--drift-sentences", type=int, default=0, help="train sentences per drift epoch (0 = all)"
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads (0 = torch's default)"
    )
    parser.add_argument(
        "--large-batch",
        type=int,
        default=0,
        help="also time one epoch at this batch size (e.g. 1024 on a GPU; 0 = off)",
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    if args.threads:
        torch.set_num_threads(args.threads)
    global DEVICE
    DEVICE = torch.device(args.device)
    torch.manual_seed(0)
    load_start = os.getloadavg()[0]

    trees = load_split(args.data, "train")
    tree_kind = "dependency" if isinstance(trees[0], DependencyTree) else "constituency"
    vocab = Vocab.build(w for t in trees for w in t.tokens)
    encoded = [encode(t, vocab, args.task) for t in trees]
    n = len(encoded)
    config_cls, model_cls = SENTIMENT_MODELS[args.model]
    model = model_cls(
        config_cls(
            embed_dim=args.embed_dim,
            hidden_dim=args.hidden_dim,
            num_classes=5 if args.task == "fine" else 2,
        ),
        len(vocab),
    ).to(DEVICE)
    train_config = TrainConfig(lr=0.05, emb_lr=0.005, weight_decay=2.7e-6)
    results: dict[str, Any] = {}
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))

    # 1. Inference: same weights, whole train set batched vs a prefix one node at a time.
    subset = encoded[: args.reference_sentences]
    inference(model, encoded[:512], 256)  # warm-up
    results["inference"] = side_by_side(
        rates(n, inference(model, encoded, 256)),
        rates(len(subset), reference_inference(model, subset)),
    )
    log("inference", results["inference"])

    # 2. Training steps side by side (a copy of the weights for each, so both start equal).
    state = {k: v.clone() for k, v in model.state_dict().items()}
    reference_steps = reference_training(model, build_optimizer(model, train_config), subset)
    model.load_state_dict(state)
    opt = build_optimizer(model, train_config)
    b25 = collated(encoded, 25)
    sub25 = b25[: max(1, len(subset) // 25)]
    results["training_steps"] = side_by_side(
        rates(sum(b.num_examples for b in sub25), train_epoch(model, opt, sub25)),
        rates(len(subset), reference_steps),
    )
    log("training steps", results["training_steps"])

    # 3. Whole epochs (batches collated once up front: the data path is not what is timed).
    model.load_state_dict(state)
    opt = build_optimizer(model, train_config)
    results["epoch_b25"] = rates(n, train_epoch(model, opt, b25))
    log("epoch b25", results["epoch_b25"])
    b256 = collated(encoded, 256)
    results["epoch_b256"] = rates(n, train_epoch(model, opt, b256))
    log("epoch b256", results["epoch_b256"])
    if args.large_batch:
        large = collated(encoded, args.large_batch)
        train_epoch(model, opt, large[:2])  # new shapes: let the GPU libraries pick kernels
        results["epoch_large"] = {
            "batch": args.large_batch,
            **rates(n, train_epoch(model, opt, large)),
        }
        log("epoch large", results["epoch_large"])

    # 4. Drift: a growing graph or a leak would show as epochs getting slower. On a shared
    # host both wall and CPU seconds move with other jobs (+-15% between 0.6 s epochs), so each
    # epoch is also divided by a fixed workload timed right after it (its median rescales).
    m = args.drift_sentences or n
    drift = collated(encoded[:m], args.drift_batch)
    times, probes = [], []
    for _ in range(args.drift_epochs):
        times.append(train_epoch(model, opt, drift))
        probes.append(host_probe())
    results["drift"] = {"epochs": len(times), "batch_size": args.drift_batch, "sentences": m}
    results["drift"]["probe_seconds"] = [round(p, 4) for p in probes]
    scale = statistics.median(probes)
    series = {
        "wall": [x.wall for x in times],
        "cpu": [x.cpu for x in times],
        "host_normalised": [x.wall / p * scale for x, p in zip(times, probes, strict=True)],
    }
    for kind, t in series.items():
        results["drift"][kind] = {
            "epoch_seconds": [round(x, 3) for x in t],
            "last_over_first": t[-1] / t[0],
            "median_last3_over_first3": statistics.median(t[-3:]) / statistics.median(t[:3]),
        }
    log("drift", results["drift"])
    results["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if DEVICE.type == "cuda":
        results["peak_cuda_mib"] = torch.cuda.max_memory_allocated(DEVICE) / 2**20

    results["setup"] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/bench_tree.py "
        + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
        "model": args.model,
        "task": args.task,
        "embed_dim": args.embed_dim,
        "hidden_dim": args.hidden_dim,
        "trees": tree_kind,
        "train_sentences": n,
        "reference_sentences": len(subset),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "cpu",
        "load_average_start": load_start,
        "load_average_end": os.getloadavg()[0],
    }
    write_results(results, Path(args.out))
    if args.json:
        print(json.dumps(results))
    return results


def pair(r: dict[str, float]) -> str:
    return f"{r['sentences_per_s']:,.0f} ({r['sentences_per_cpu_s']:,.0f})"


def write_results(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    s = results["setup"]
    stem = out / f"tree-{s['model']}{'-dep' if s['trees'] == 'dependency' else ''}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    inf, tr, d = results["inference"], results["training_steps"], results["drift"]
    e25, e256 = results["epoch_b25"], results["epoch_b256"]
    lines = [
        f"# Tree model speed: {s['model']} (E={s['embed_dim']}, D={s['hidden_dim']}, task {s['task']})",
        "",
        f"- date: {s['date']}; command: `{s['command']}`",
        f"- machine: {s['nproc']} CPUs ({s['cpu']}), device {s['device']}, torch {s['torch']},"
        f" {s['torch_threads']} threads;"
        f" load average {s['load_average_start']:.2f} at start, {s['load_average_end']:.2f} at end"
        " (other jobs share the CPUs when it is above 0)",
        f"- data: SST train ({s['trees']} trees), {s['train_sentences']}"
        f" sentences; the reference is timed on the first"
        f" {s['reference_sentences']}",
        "",
        "Rates are per wall-clock second and, in brackets, per CPU second of this process"
        " (with one torch thread: the speed on an idle core).",
        "",
        "| measure | level-batched | recursive reference | ratio | goal |",
        "| --- | ---: | ---: | ---: | --- |",
        f"| inference, sentences/s (batch 256 vs one node at a time) | {pair(inf['batched'])}"
        f" | {pair(inf['reference'])} | {inf['ratio']:,.1f}x ({inf['ratio_cpu']:,.1f}x) | >= 100x |",
        f"| training, sentences/s (batch 25 vs one sentence per step) | {pair(tr['batched'])}"
        f" | {pair(tr['reference'])} | {tr['ratio']:,.1f}x ({tr['ratio_cpu']:,.1f}x) | |",
        "",
        "| measure | value | goal |",
        "| --- | ---: | --- |",
        f"| training epoch, batch 25 | {e25['seconds']:.1f} s ({e25['cpu_seconds']:.1f} CPU s);"
        f" {pair(e25)} sentences/s | <= 10 s |",
        f"| training epoch, batch 256 | {pair(e256)} sentences/s;"
        f" {e256['seconds']:.1f} s ({e256['cpu_seconds']:.1f} CPU s) | >= 3,000 sentences/s |",
        f"| epoch-time drift over {d['epochs']} epochs of {d['sentences']:,} sentences"
        f" (batch {d['batch_size']}), last / first | wall {d['wall']['last_over_first']:.3f},"
        f" CPU {d['cpu']['last_over_first']:.3f}, host-normalised"
        f" {d['host_normalised']['last_over_first']:.3f} (medians of last 3 / first 3: wall"
        f" {d['wall']['median_last3_over_first3']:.3f}, CPU {d['cpu']['median_last3_over_first3']:.3f},"
        f" host-normalised {d['host_normalised']['median_last3_over_first3']:.3f}) | <= 1.05 |",
        *(
            [
                f"| training epoch, batch {large['batch']} | {pair(large)} sentences/s;"
                f" {large['seconds']:.2f} s | >= 20,000 sentences/s on an H200 |"
            ]
            if (large := results.get("epoch_large"))
            else []
        ),
        f"| peak RSS | {results['peak_rss_mib']:,.0f} MiB | |",
        *(
            [f"| peak GPU memory allocated | {results['peak_cuda_mib']:,.0f} MiB | |"]
            if "peak_cuda_mib" in results
            else []
        ),
        "",
        f"Epoch wall seconds: {', '.join(f'{t:.2f}' for t in d['wall']['epoch_seconds'])}",
        "",
        f"Epoch CPU seconds: {', '.join(f'{t:.2f}' for t in d['cpu']['epoch_seconds'])}",
        "",
        f"Host probe seconds after each epoch: {', '.join(f'{t:.4f}' for t in d['probe_seconds'])}",
        "",
    ]
    stem.with_suffix(".md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()

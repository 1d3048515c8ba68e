"""QANet training speed and peak memory: the faithful model beside the naive one.

Paper configuration (D=128, 8 heads, char 200, word 300), batch 32, context L=400, question
J=50, W=16 characters per word, synthetic batches of those exact shapes. Each model runs in
its own child process so peak memory (host RSS on CPU, ``torch.cuda.max_memory_allocated`` on
GPU) belongs to that model alone. Reported: training examples/s (forward + backward + Adam
step, after warm-up steps) and peak memory, and the ratios faithful/naive.

    python benchmarks/bench_qanet.py --device cpu --steps 3
    python benchmarks/bench_qanet.py --device cuda --amp bf16 --steps 50 --json
    python benchmarks/bench_qanet.py --device cuda --amp bf16 --steps 50 --compile --only faithful

``--compile`` runs the model under ``torch.compile`` (one graph for forward and loss; the
warm-up steps pay for compiling, so give at least 2); ``--compile reduce-overhead`` also replays
the compiled step as CUDA graphs, one launch instead of thousands (the shapes here are fixed).
``--fused-adam`` steps with torch's fused Adam kernel instead of its default. ``--model-config`` takes the model from
a config file's ``[model]`` table instead of the paper's, e.g. the reduced CPU model, and
``--attention-dropout 0`` switches off dropout on the attention weights:

    python benchmarks/bench_qanet.py --model-config configs/qanet_cpu_small.toml --batch 16 \
      --context 150 --question 20 --threads 1 --steps 5 --attention-dropout 0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tomllib
from typing import Any

import torch

from treeqa.data.qa_batch import QABatch
from treeqa.models.qanet import QANet, QANetConfig
from treeqa.models.qanet_naive import NaiveQANet
from treeqa.train.loop import autocast

MODELS = {"faithful": QANet, "naive": NaiveQANet}


def synthetic_batch(args: argparse.Namespace, vocab: int, chars: int) -> QABatch:
    g = torch.Generator().manual_seed(0)
    b, length, qlength, w = args.batch, args.context, args.question, args.chars
    starts = torch.randint(0, length - 30, (b,), generator=g)
    return QABatch(
        context_words=torch.randint(1, vocab, (b, length), generator=g),
        context_chars=torch.randint(1, chars, (b, length, w), generator=g),
        question_words=torch.randint(1, vocab, (b, qlength), generator=g),
        question_chars=torch.randint(1, chars, (b, qlength, w), generator=g),
        starts=starts,
        ends=starts + torch.randint(0, 30, (b,), generator=g),
        index=torch.arange(b),
    )


def model_config(args: argparse.Namespace) -> QANetConfig:
    """The paper's QANet, or a config file's [model] table; then --attention-dropout."""
    table: dict[str, Any] = {}
    if args.model_config:
        with open(args.model_config, "rb") as f:
            table = tomllib.load(f).get("model", {})
    if args.attention_dropout is not None:
        table["attention_dropout"] = args.attention_dropout
    return dataclasses.replace(QANetConfig(), **table)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Train ``args.only`` for warm-up + measured steps in this process."""
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    vocab, chars = args.vocab, 256
    model = MODELS[args.only](model_config(args), vocab, chars, torch.randn(vocab, 300)).to(device)
    optimizer = torch.optim.Adam(
        [p for p in model.parameters() if p.requires_grad],
        lr=1e-3,
        betas=(0.8, 0.999),
        eps=1e-7,
        fused=args.fused_adam or None,
    )
    batch = synthetic_batch(args, vocab, chars).to(device)
    model.train()
    forward = torch.compile(model, mode=args.compile) if args.compile else model

    def step() -> None:
        with autocast(device, args.amp):
            loss = forward(batch).loss
        assert loss is not None
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        step()
    sync()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if args.profile:
        profile(step, args.profile, device)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
        kind = "cuda_max_allocated"
    else:  # ru_maxrss is in KiB on Linux: the whole process's high-water mark
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        kind = "host_peak_rss"
    return {
        "model": args.only + variant(args),
        "examples_per_s": args.batch * args.steps / elapsed,
        "step_s": elapsed / args.steps,
        # CPU seconds of this process: on a shared machine wall time measures the neighbours,
        # so with one thread examples per CPU-second is the steadier comparison.
        "examples_per_cpu_s": args.batch * args.steps / cpu,
        "peak_mib": peak,
        "memory": kind,
        "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }


def variant(args: argparse.Namespace) -> str:
    """How the measured step differs from plain eager training, for its result's name."""
    parts = (
        []
        if not args.compile
        else ["compiled" + ("" if args.compile == "default" else f" {args.compile}")]
    )
    parts += ["fused Adam"] * args.fused_adam
    return f" ({', '.join(parts)})" if parts else ""


def profile(step: Any, steps: int, device: torch.device) -> None:
    """Run ``steps`` more training steps under torch.profiler and print, to stderr, the
    operators that took the most time of their own: on the device (kernels) and on the host."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    table = prof.key_averages()
    if device.type == "cuda":
        print(
            table.table(sort_by="self_device_time_total", row_limit=30, max_name_column_width=60),
            file=sys.stderr,
        )
    print(
        table.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60),
        file=sys.stderr,
    )


def machine(device: str, threads: int) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    desc = f"nproc {os.cpu_count()}, {threads or torch.get_num_threads()} torch threads, {cpu}"
    if device.startswith("cuda"):
        desc += f", {torch.cuda.get_device_name()}"
    return desc


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--amp", default="off", help="off | bf16 | fp16 (GPU only)")
    parser.add_argument("--steps", type=int, default=3, help="measured training steps per model")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured steps first")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=400)
    parser.add_argument("--question", type=int, default=50)
    parser.add_argument("--chars", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=20_000, help="rows of the fixed word table")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0 = torch's default)")
    parser.add_argument("--only", choices=sorted(MODELS), help="measure one model in this process")
    parser.add_argument(
        "--compile",
        nargs="?",
        const="default",
        choices=["default", "reduce-overhead", "max-autotune"],
        help="run the model under torch.compile, in this mode (default: default)",
    )
    parser.add_argument("--fused-adam", action="store_true", help="torch's fused Adam kernel")
    parser.add_argument("--model-config", help="a config file whose [model] table sets the model")
    parser.add_argument(
        "--attention-dropout", type=float, help="dropout on attention weights (default: dropout)"
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="with --only: N more steps under torch.profiler, the costliest operators to stderr",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.only:
        print(json.dumps(measure(args)))
        return 0
    results: dict[str, dict[str, Any]] = {}
    for name in MODELS:  # a fresh process each: peak memory must not carry over
        argv = [a for a in sys.argv[1:] if a != "--json"]
        run = subprocess.run(
            [sys.executable, __file__, *argv, "--only", name], capture_output=True, text=True
        )
        if run.returncode != 0:  # e.g. killed by the kernel for lack of memory: say so
            error = run.stderr.strip().splitlines()[-1:] or [f"exit status {run.returncode}"]
            results[name] = {"model": name, "failed": f"exit status {run.returncode}: {error[0]}"}
            print(f"{name}: failed ({results[name]['failed']})", file=sys.stderr)
            continue
        results[name] = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"{name}: {json.dumps(results[name])}", file=sys.stderr)
    if any("failed" in r for r in results.values()):
        print(json.dumps({"machine": machine(args.device, args.threads), "results": results}))
        return 1
    fast, naive = results["faithful"], results["naive"]
    cpu_speedup = fast["examples_per_cpu_s"] / naive["examples_per_cpu_s"]
    summary = {
        "config": {
            k: getattr(args, k)
            for k in (
                "device",
                "threads",
                "amp",
                "steps",
                "warmup",
                "batch",
                "context",
                "question",
                "chars",
                "compile",
                "fused_adam",
                "model_config",
                "attention_dropout",
            )
        },
        "machine": machine(args.device, args.threads),
        "torch": torch.__version__,
        "results": results,
        "speedup": fast["examples_per_s"] / naive["examples_per_s"],
        "speedup_cpu_time": cpu_speedup,
        "memory_ratio": naive["peak_mib"] / fast["peak_mib"],
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"machine: {summary['machine']}; torch {torch.__version__}; {summary['config']}")
    print(f"{'model':<10} {'examples/s':>11} {'ex/CPU-s':>9} {'s/step':>8} {'peak MiB':>9}  params")
    for r in results.values():
        print(
            f"{r['model']:<10} {r['examples_per_s']:>11.3f} {r['examples_per_cpu_s']:>9.3f}"
            f" {r['step_s']:>8.2f} {r['peak_mib']:>9.0f}  {r['params']:,}"
        )
    print(
        f"speed-up faithful/naive: {summary['speedup']:.2f}x wall, {cpu_speedup:.2f}x CPU time;"
        f" peak memory naive/faithful: {summary['memory_ratio']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

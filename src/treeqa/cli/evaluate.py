"""``treeqa evaluate [sentiment|qa]``: score a checkpoint, or train N seeds and report mean +- std."""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path
from typing import Any

from treeqa.cli import evaluate_qa
from treeqa.cli.common import emit_json, format_metrics, subparser
from treeqa.cli.train import add_common_config_flags, sentiment_config

EXAMPLE = (
    "treeqa evaluate --checkpoint runs/tl --data data/sst --split test --json\n"
    "  treeqa evaluate --seeds 3 --config configs/tree_lstm_fine.toml --out runs/tl3 --split test\n"
    "  treeqa evaluate qa --gold dev-v1.1.json --predictions predictions.json"
)


def add_parser(subparsers: Any) -> None:
    parser = subparser(
        subparsers,
        "evaluate",
        "Root and all-node accuracy (fine and binary) of a checkpoint.",
        EXAMPLE,
    )
    parser.add_argument("--checkpoint", type=Path, help="run directory or checkpoint file")
    parser.add_argument(
        "--split", choices=("train", "dev", "test"), help="default: test (sentiment), dev (qa)"
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=0,
        help="train this many seeds (with --config/--out) and report mean +- std",
    )
    parser.add_argument(
        "--out", type=Path, help="with --seeds: directory for the runs (seed-K inside)"
    )
    add_common_config_flags(parser)
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    evaluate_qa.add_evaluate_arguments(parser)
    parser.set_defaults(run=run, accepts_overrides=True)


def run(args: argparse.Namespace) -> int:
    if args.task_word == "qa":
        return evaluate_qa.evaluate_main(args)
    from treeqa.recipes import sentiment

    args.split = args.split or "test"
    if args.seeds > 0:
        return run_seeds(args)
    if args.checkpoint is None:
        raise ValueError("give --checkpoint RUN_DIR (or --seeds N with a config to train)")
    data = (
        args.data
        if args.data is not None
        else sentiment.load_model(args.checkpoint).meta["data"]["path"]
    )
    metrics = sentiment.evaluate(args.checkpoint, data, args.split)
    print(
        f"{args.checkpoint} on {args.split} ({data or 'embedded demo'}):\n{format_metrics(metrics)}"
    )
    if args.json:
        emit_json(metrics)
    return 0


def run_seeds(args: argparse.Namespace) -> int:
    from treeqa.recipes import sentiment
    from treeqa.train.distributed import World

    config = sentiment_config(args)
    out = args.out or Path("runs") / config.name
    per_seed: list[dict[str, float]] = []
    main = World.from_env().main
    for k in range(args.seeds):
        seeded = dataclasses.replace(
            config, train=dataclasses.replace(config.train, seed=config.train.seed + k)
        )
        run_dir = out / f"seed-{seeded.train.seed}"
        # A seed's directory from an earlier call is continued (or, killed early, restarted).
        sentiment.train(seeded, run_dir, resume_run=run_dir.is_dir())
        if not main:  # under torchrun, process 0 scores and reports
            continue
        scores = sentiment.evaluate(run_dir, config.data.path, args.split)
        print(
            f"seed {seeded.train.seed}: "
            + " ".join(f"{k}={v:.4f}" for k, v in scores.items() if k.endswith("acc"))
        )
        per_seed.append(scores)
    if not main:
        return 0
    summary: dict[str, Any] = {"seeds": args.seeds, "split": args.split}
    for key in per_seed[0]:
        values = [s[key] for s in per_seed]
        if key.endswith("_acc"):
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            summary[key] = {"mean": statistics.fmean(values), "std": std, "values": values}
            print(f"  {key:<18} {100 * summary[key]['mean']:.2f} +- {100 * std:.2f}")
    if args.json:
        emit_json(summary)
    return 0

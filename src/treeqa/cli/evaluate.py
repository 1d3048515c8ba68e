"""``treeqa evaluate [sentiment]``: score a checkpoint, or train N seeds and report mean +- std."""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from typing import Any

from treeqa.cli import evaluate_qa, flags
from treeqa.cli.common import (
    emit_json,
    format_metrics,
    positive_int,
    refuse_unused,
    run_dir,
    subparser,
)
from treeqa.cli.train import sentiment_config

HELP = "Score a sentiment checkpoint or N seeds, or (`evaluate qa`) SQuAD answers."
EXAMPLE = (
    "treeqa evaluate --checkpoint runs/tl --data data/sst --split test --json\n"
    "  treeqa evaluate --seeds 3 --config tree_lstm_fine --out runs/tl3 --split test"
)
USAGE = (
    "%(prog)s [-h] --checkpoint RUN [--data DIR]\n"
    "              [--split {train,dev,test}] [--json]\n"
    "       %(prog)s [-h] --seeds N [--out DIR] [--config TOML]\n"
    "              [config flags] [--key=value ...] [--split {train,dev,test}] [--json]"
)
"""A line for each way to use it: argparse's one line would not say which flags go together."""
DESCRIPTION = (
    "Root and all-node accuracy (fine-grained and binary) of a sentiment checkpoint; or train N "
    "seeds (--seeds N, set up by --config, the config flags and any --key=value) and report "
    "each accuracy's mean +- std. Reading comprehension: `treeqa evaluate qa --help`.\n\n"
    + flags.CONFIG_HELP.format(sections="sections data, model, train")
)


def add_parser(subparsers: Any, task: str) -> argparse.ArgumentParser:
    if task == "qa":
        return evaluate_qa.add_parser(subparsers, HELP)
    parser = subparser(
        subparsers,
        "evaluate",
        HELP,
        EXAMPLE,
        description=DESCRIPTION,
        prog=flags.usage_prog("evaluate", task),
        usage=USAGE,
    )
    flags.add_checkpoint(parser, "the model to score on --data")
    flags.add_split(parser, "test")
    flags.add_json(parser)
    parser.add_argument(
        "--seeds",
        type=positive_int,
        metavar="N",
        help="instead of --checkpoint, train N seeds (train.seed, train.seed + 1, ...) and "
        "score each (default: none)",
    )
    flags.add_out(parser, "with --seeds: the directory for the runs, seed-K inside")
    flags.add_config(parser, "tree_lstm_fine")
    flags.add_config_flags(
        parser,
        "sentiment",
        defaults={"data": "with --checkpoint, the data it was trained on; else the embedded demo"},
    )
    parser.set_defaults(run=run, accepts_overrides=True)
    return parser


TRAINING = [flag for flag in flags.config_flags("sentiment") if flag.name != "data"]
"""The config flags that set up training: --data also says what a checkpoint is scored on."""


def run(args: argparse.Namespace) -> int:
    from treeqa.recipes import sentiment
    from treeqa.train import checkpoint as ckpt

    args.split = args.split or "test"
    if args.seeds:
        refuse_unused({"--checkpoint": args.checkpoint}, "with --seeds, which trains its models")
        return run_seeds(args)
    if args.checkpoint is None:
        raise ValueError("give --checkpoint RUN_DIR (or --seeds N with a config to train)")
    setup = {f"--{f.name}": getattr(args, f.name) for f in TRAINING}
    setup |= {"--config": args.config, "--out": args.out}
    setup |= {arg.split("=", 1)[0]: True for arg in args.overrides if arg.startswith("--")}
    refuse_unused(setup, "without --seeds: they set up training; --checkpoint is trained already")
    data = (
        args.data
        if args.data is not None
        else sentiment.load_model(args.checkpoint).meta["data"]["path"]
    )
    if note := ckpt.read_instead(args.checkpoint):
        print(f"NOTE: {note}", file=sys.stderr)
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
    from treeqa.train.loop import Interrupted

    config = sentiment_config(args)
    sentiment.load_trees(config.data, (args.split,))  # a split to score that is not there: now
    out = run_dir(args, config.name)
    per_seed: list[dict[str, float]] = []
    epochs: list[int] = []  # each seed's, as trained: more than asked when resumed further
    main = World.from_env().main
    for k in range(args.seeds):
        seeded = dataclasses.replace(
            config, train=dataclasses.replace(config.train, seed=config.train.seed + k)
        )
        seed_dir = out / f"seed-{seeded.train.seed}"
        # A seed's directory from an earlier call is continued (or, killed early, restarted).
        try:
            trained = sentiment.train(seeded, seed_dir, resume_run=seed_dir.is_dir())
        except Interrupted as stop:  # evaluate has no --resume: the same command goes on
            saved = str(stop).rsplit(";", 1)[0]
            stop.args = (f"{saved}; run this command again to go on from there",)
            if args.json and main:  # where it stopped, as train --json says it
                emit_json(
                    {
                        "seeds": args.seeds,
                        "split": args.split,
                        "scored": len(per_seed),
                        "epochs": epochs,
                        "interrupted": stop.summary["interrupted"],
                        "seed": seeded.train.seed,
                        "run_dir": str(seed_dir),
                        "steps": stop.summary["steps"],
                    }
                )
            raise
        if not main:  # under torchrun, process 0 scores and reports
            continue
        scores = sentiment.evaluate(seed_dir, config.data.path, args.split)
        print(
            f"seed {seeded.train.seed}: "
            + " ".join(f"{k}={v:.4f}" for k, v in scores.items() if k.endswith("acc"))
        )
        per_seed.append(scores)
        epochs.append(int(trained["epochs"]))
    if not main:
        return 0
    summary: dict[str, Any] = {"seeds": args.seeds, "split": args.split, "epochs": epochs}
    longer = [
        f"seed {config.train.seed + k}: {n}"
        for k, n in enumerate(epochs)
        if n > config.train.epochs
    ]
    if longer:
        print(
            f"NOTE: train.epochs is {config.train.epochs}, but some seeds were trained further "
            f"(resumed with more epochs before): {', '.join(longer)} epochs; the mean mixes runs "
            "of different lengths"
        )
    print(f"mean +- std over {len(per_seed)} seeds, in % (each seed's line above: fractions)")
    for key in per_seed[0]:
        values = [s[key] for s in per_seed]
        if key.endswith("_acc"):
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            summary[key] = {"mean": statistics.fmean(values), "std": std, "values": values}
            print(f"  {key:<18} {100 * summary[key]['mean']:.2f} +- {100 * std:.2f}")
    if args.json:
        emit_json(summary)
    return 0

"""``treeqa train [sentiment|qa]``: train a model into a run directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from treeqa.cli.common import (
    STRICT_STOP,
    check_out,
    emit_json,
    exit_code,
    named_overrides,
    subparser,
)

EXAMPLE = (
    "treeqa train sentiment --model tree_lstm --data data/sst --vectors glove.txt.gz --out runs/tl\n"
    "  treeqa train sentiment --config configs/tree_lstm_fine.toml --train.epochs=5\n"
    "  treeqa train sentiment --resume runs/tl        # continue a killed run\n"
    "  treeqa train qa --config configs/qanet_paper.toml --data.prepared runs/squad_v1 --out runs/qanet"
)


def add_common_config_flags(parser: argparse.ArgumentParser) -> None:
    """The config keys every training command shows in --help; any other --key=value also works."""
    parser.add_argument("--config", type=Path, help="TOML config (see configs/)")
    parser.add_argument("--model", help="sentiment: bow | tree_lstm | childsum | tree_gru")
    parser.add_argument("--task", help="fine | binary | binary3")
    parser.add_argument("--data", help="dataset directory (default: the embedded demo treebank)")
    parser.add_argument(
        "--vectors",
        help="sentiment word vectors: GloVe text (.txt/.gz) or spaCy table; A+B = side by side",
    )
    parser.add_argument("--epochs", help="passes over the training data")
    parser.add_argument("--batch_size", help="examples per step")
    parser.add_argument("--seed", help="random seed")
    parser.add_argument("--health", help="off | on | strict: training-health monitor")


def add_parser(subparsers: Any) -> None:
    parser = subparser(
        subparsers, "train", "Train a model; any config key can be set with --key=value.", EXAMPLE
    )
    add_common_config_flags(parser)
    parser.add_argument("--out", type=Path, help="run directory (default: runs/NAME)")
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its last checkpoint",
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.set_defaults(run=run, accepts_overrides=True)


NAMED = ("model", "task", "data", "vectors", "epochs", "batch_size", "seed", "health")
"""The sentiment flags argparse reads itself."""


def sentiment_config(args: argparse.Namespace, base: Path | None = None) -> Any:
    from treeqa.config import load_toml, parse_overrides
    from treeqa.recipes.sentiment import resolve_config

    source = base / "config.toml" if base is not None else args.config
    raw = load_toml(source) if source else {}
    named = named_overrides(args, NAMED)
    return resolve_config(raw, named + parse_overrides(args.overrides), len(named))


def run(args: argparse.Namespace) -> int:
    if args.task_word == "qa":
        from treeqa.cli import qa_commands

        return qa_commands.train_main(args)
    from treeqa.recipes.sentiment import train
    from treeqa.train.distributed import World

    check_out(args)
    config = sentiment_config(args, args.resume)
    out = args.resume or args.out or Path("runs") / config.name
    result = train(config, out, resume_run=args.resume is not None)
    if not World.from_env().main:  # under torchrun, process 0 reports
        return STRICT_STOP if result["aborted"] else 0
    print(
        f"run directory: {out}\nbest dev {config.train.metric}: {result['best_dev']:.4f} (epoch {result['best_epoch']})"
    )
    if args.json:
        emit_json({"run_dir": str(out), **result})
    return exit_code(result, out)

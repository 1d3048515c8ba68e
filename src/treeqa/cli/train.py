"""``treeqa train [sentiment]`` and ``treeqa train qa``: train a model into a run directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from treeqa.cli import flags, qa_commands
from treeqa.cli.common import (
    check_out,
    report_run,
    run_dir,
    say_if_amp_does_nothing,
    subparser,
    summary_if_interrupted,
)

HELP = "Train a sentiment model, or QANet (`train qa`), into a run directory."
EXAMPLES = {
    "sentiment": (
        "treeqa train sentiment --model tree_lstm --data data/sst --vectors glove.txt.gz "
        "--out runs/tl\n"
        "  treeqa train sentiment --config tree_lstm_fine --train.epochs=5\n"
        "  treeqa train sentiment --resume runs/tl        # continue a killed run\n"
        "  treeqa train sentiment --model tree_gru --emblr 0 --rel_dim 0 --tag_dim 0 "
        "--optim adagrad --name basic --lr 0.05 --wd 1e-4 --at_hid_dim 0"
    ),
    "qa": (
        "treeqa train qa --config qanet_paper --prepared runs/squad_v1 "
        "--out runs/qanet\n"
        "  treeqa train qa --config qanet_cpu_small --schedule.budget_minutes=45\n"
        "  treeqa train qa --resume runs/qanet"
    ),
}
CONFIG_EXAMPLES = {"sentiment": "tree_lstm_fine", "qa": "qanet_paper"}
DESCRIPTIONS = {
    "sentiment": (
        "Train a sentiment model (bag of words, Tree-LSTM, Child-Sum Tree-LSTM or Tree-GRU) "
        "on SST-format trees into a run directory. `treeqa train` is `treeqa train sentiment`; "
        "QANet's flags: `treeqa train qa --help`.\n\n"
        + flags.CONFIG_HELP.format(sections="sections data, model, train")
    ),
    "qa": (
        "Train QANet on a prepared SQuAD directory into a run directory. The sentiment models' "
        "flags: `treeqa train sentiment --help`.\n\n"
        + flags.CONFIG_HELP.format(
            sections="sections data, schedule, train, model: --config qanet_paper"
        )
    ),
}


def add_parser(subparsers: Any, task: str) -> argparse.ArgumentParser:
    parser = subparser(
        subparsers,
        "train",
        HELP,
        EXAMPLES[task],
        description=DESCRIPTIONS[task],
        prog=flags.usage_prog("train", task),
    )
    flags.add_config(parser, CONFIG_EXAMPLES[task])
    flags.add_resume(parser)
    flags.add_out(parser)
    flags.add_json(parser)
    flags.add_config_flags(parser, task)
    run = qa_commands.train_main if task == "qa" else train_sentiment
    parser.set_defaults(run=run, accepts_overrides=True)
    return parser


def sentiment_config(args: argparse.Namespace, base: Path | None = None) -> Any:
    """The resolved config: ``base``'s config.toml (a resumed run) or --config, then the
    config flags, then the other overrides."""
    from treeqa.config import ConfigError, load_toml, parse_overrides
    from treeqa.recipes.sentiment import ALIASES, resolve_config

    source = base / "config.toml" if base is not None else args.config
    named = flags.named_overrides(args, flags.config_flags("sentiment"))
    if base is not None and source is not None and source.is_file():
        # Another model's keys would fail first, and say less than this does.
        saved = load_toml(source).get("model", {})
        saved_name = saved.get("name", "bow") if isinstance(saved, dict) else "bow"
        for key, value in named + parse_overrides(args.overrides):
            if ALIASES.get(key, key) in ("model", "model.name") and value != saved_name:
                raise ConfigError(
                    f"{base} trains a {saved_name} model, and a resumed run keeps its own: "
                    f"give another --out to train {value}"
                )
    return flags.resolve_file(resolve_config, source, named, args.overrides)


def train_sentiment(args: argparse.Namespace) -> int:
    from treeqa.recipes.sentiment import train

    check_out(args)
    config = sentiment_config(args, args.resume)
    say_if_amp_does_nothing(args, config.train)
    out = run_dir(args, config.name)
    with summary_if_interrupted(args, out):
        result = train(config, out, resume_run=args.resume is not None)
    return report_run(args, out, result, config.train.metric, ".4f")

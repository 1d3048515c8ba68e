"""``treeqa`` command line: one module per subcommand, each a thin layer over the library."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from treeqa import __version__
from treeqa.cli import data, doctor, evaluate, predict, serve, train

SUBCOMMANDS = (data, train, evaluate, predict, serve, doctor)
TASK_COMMANDS = ("train", "evaluate", "predict")
TASKS = ("sentiment", "qa")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="treeqa",
        description="Tree-structured sentiment models on SST and QANet on SQuAD.",
        epilog="Run `treeqa COMMAND --help` for the options and an example of each command.",
    )
    parser.add_argument("--version", action="version", version=f"treeqa {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # `treeqa train sentiment ...` / `treeqa evaluate qa ...`: the task word is not an argparse
    # positional, so override values such as `--emblr 0` can never be taken for it.
    task_word = "sentiment"
    if len(argv) > 1 and argv[0] in TASK_COMMANDS and argv[1] in TASKS:
        task_word = argv.pop(1)
    args, extra = parser.parse_known_args(argv)
    args.task_word = task_word
    if extra and not getattr(args, "accepts_overrides", False):
        parser.error(f"unrecognised arguments: {' '.join(extra)}")
    args.overrides = extra
    try:
        return int(args.run(args) or 0)
    except (ValueError, FileNotFoundError, OSError) as err:
        print(f"treeqa {args.command}: error: {err}", file=sys.stderr)
        return 2

"""``treeqa predict [sentiment|qa]``: labels for every node of bracketed trees."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from treeqa.cli import qa_commands
from treeqa.cli.common import subparser

EXAMPLE = (
    "treeqa predict --checkpoint runs/tl '(2 (2 the) (2 (2 movie) (2 (2 is) (2 good))))'\n"
    "  treeqa predict --checkpoint runs/tl --input trees.txt --json\n"
    "  treeqa predict --checkpoint runs/childsum-dep --text 'Not my favourite film.'\n"
    "  treeqa predict qa --checkpoint runs/qanet --context '...' --question '...'"
)


def add_parser(subparsers: Any) -> None:
    parser = subparser(
        subparsers, "predict", "Predict the sentiment of every node of bracketed trees.", EXAMPLE
    )
    parser.add_argument(
        "--checkpoint", type=Path, required=True, help="run directory or checkpoint file"
    )
    parser.add_argument(
        "trees", nargs="*", help="bracketed trees (labels optional: '((the) (movie))')"
    )
    parser.add_argument(
        "--input",
        type=Path,
        help="a file with one bracketed tree per line (or dependency trees, .jsonl)",
    )
    parser.add_argument(
        "--text",
        action="append",
        default=[],
        help="raw text, parsed into dependency trees (models trained on them); repeatable",
    )
    parser.add_argument(
        "--demo-examples",
        action="store_true",
        help="predict the demo treebank's showcase sentences",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per tree")
    # `predict qa` flags: declared here so `--context TEXT` is never taken for a tree.
    qa_commands.add_predict_arguments(parser)
    parser.set_defaults(run=run, accepts_overrides=True)


def run(args: argparse.Namespace) -> int:
    if args.task_word == "qa":
        return qa_commands.predict_main(args)
    if args.overrides:
        raise ValueError(f"unrecognised arguments: {' '.join(args.overrides)}")
    if args.context is not None or args.question is not None:
        raise ValueError(
            "--context and --question are for reading comprehension: treeqa predict qa"
        )
    from treeqa.data.sst import read_tree_file
    from treeqa.data.tree import Tree, iter_trees
    from treeqa.recipes.sentiment import load_model, predict

    trees: list[Tree] = list(iter_trees(args.trees, "<command line>"))
    if args.input:
        trees += read_tree_file(args.input)
    if args.demo_examples:
        from treeqa.data.demo import DEMO_EXAMPLES

        trees += list(iter_trees(DEMO_EXAMPLES, "<demo examples>"))
    if not trees and not args.text:
        raise ValueError("nothing to predict: give trees, --text, --input FILE or --demo-examples")
    loaded = load_model(args.checkpoint)
    trees += [tree for text in args.text for tree in loaded.parse(text)]
    results = predict(loaded, trees)
    if args.output:
        with args.output.open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(result) + "\n" for result in results)
        print(f"wrote {len(results)} trees to {args.output}", file=sys.stderr)
        return 0
    for result in results:
        if args.json:
            print(json.dumps(result))
            continue
        print(f"{result['label']}  {result['text']}")
        for node in result["nodes"][1:]:
            if " " in node["words"]:
                print(f"    {node['label']}  {node['words']}")
    return 0

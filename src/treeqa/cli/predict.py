"""``treeqa predict [sentiment]``: labels for every node of trees; ``treeqa predict qa``: answers."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from treeqa.cli import flags, qa_commands
from treeqa.cli.common import subparser

HELP = "Predict the sentiment of every node of trees, or (`predict qa`) answer questions."
EXAMPLES = {
    "sentiment": (
        "treeqa predict --checkpoint runs/tl '(2 (2 the) (2 (2 movie) (2 (2 is) (2 good))))'\n"
        "  treeqa predict --checkpoint runs/tl --input trees.txt --json\n"
        "  treeqa predict --checkpoint runs/childsum-dep --text 'Not my favourite film.'"
    ),
    "qa": (
        "treeqa predict qa --checkpoint runs/qanet --context 'Paris is the capital of France.' "
        "--question 'What is the capital of France?'\n"
        "  treeqa predict qa --checkpoint runs/qanet --input questions.jsonl --output answers.jsonl"
    ),
}
DESCRIPTIONS = {
    "sentiment": (
        "The sentiment label and probabilities of every node of bracketed trees (or of raw "
        "text, for a model trained on dependency trees), from a sentiment checkpoint. "
        "Reading comprehension: `treeqa predict qa --help`."
    ),
    "qa": (
        "Answer questions about passages with a QANet checkpoint: the answer span, its "
        "character offsets and score (a SQuAD 2.0 model adds its no-answer margin). "
        "Sentiment: `treeqa predict sentiment --help`."
    ),
}


def add_parser(subparsers: Any, task: str) -> argparse.ArgumentParser:
    parser = subparser(
        subparsers,
        "predict",
        HELP,
        EXAMPLES[task],
        description=DESCRIPTIONS[task],
        prog=flags.usage_prog("predict", task),
    )
    flags.add_checkpoint(parser, "the model", required=True)
    if task == "qa":
        parser.add_argument("--context", metavar="TEXT", help="the passage to read (default: none)")
        parser.add_argument(
            "--question", metavar="TEXT", help="the question about --context (default: none)"
        )
        flags.add_input(
            parser, 'a JSONL file, one {"context": ..., "question": ...} a line ("-": stdin)'
        )
    else:
        parser.add_argument(
            "trees",
            nargs="*",
            metavar="TREE",
            help="bracketed trees, labels optional: '((the) (movie))'",
        )
        parser.add_argument(
            "--text",
            action="append",
            default=[],
            help="raw text, parsed into dependency trees (a model trained on them); "
            "repeatable (default: none)",
        )
        flags.add_input(
            parser, "a file of bracketed trees, one a line (or dependency trees, .jsonl)"
        )
        parser.add_argument(
            "--demo-examples",
            action="store_true",
            help="also predict the demo treebank's showcase sentences (default: off)",
        )
    flags.add_output(parser)
    flags.add_json(parser, "print one JSON object per result")
    parser.set_defaults(run=qa_commands.predict_main if task == "qa" else run)
    return parser


def run(args: argparse.Namespace) -> int:
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

"""``treeqa predict [sentiment]``: labels for every node of trees; ``treeqa predict qa``: answers."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treeqa.cli import flags, qa_commands
from treeqa.cli.common import (
    STDIN,
    check_output,
    json_line,
    one_line,
    output_file,
    subparser,
    unicode_stdout,
)

if TYPE_CHECKING:
    from treeqa.data.tree import Tree

HELP = "Predict the sentiment of every node of trees, or (`predict qa`) answer questions."
EXAMPLES = {
    "sentiment": (
        "treeqa predict --checkpoint runs/tl '(2 (2 the) (2 (2 movie) (2 (2 is) (2 good))))'\n"
        "  treeqa predict --checkpoint runs/tl --input trees.txt --json\n"
        "  cat trees.txt | treeqa predict --checkpoint runs/tl --input -\n"
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
        "text, for a model trained on dependency trees), from a sentiment checkpoint: as text, "
        "the sentence's label and each phrase's of two words or more (a word's with --json, "
        "which gives every node with its probabilities). "
        "Reading comprehension: `treeqa predict qa --help`."
    ),
    "qa": (
        "Answer questions about passages with a QANet checkpoint: the answer span, its "
        "character offsets and score (a SQuAD 2.0 model adds its no-answer margin). "
        "Sentiment: `treeqa predict sentiment --help`.\n\n"
        "Printed as text, each answer is one line: the answer, a tab, then its score and "
        "offsets; a run of tabs or line breaks inside an answer is printed as one space. "
        "--json, --input and --output give JSON lines with the exact text."
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
            parser,
            'a file of bracketed trees, one a line (or dependency trees, .jsonl); "-": '
            "bracketed trees from stdin",
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


PREDICT_BATCH = 256
"""Trees predicted at once: each batch is written out as soon as it is done."""


def _numbered(lines: list[str], source: str) -> list[tuple[str, Tree]]:
    """(``source:line``, tree) for each tree of ``lines``, one a non-blank line."""
    from treeqa.data.tree import iter_trees, line_text

    given = [n for n, text in enumerate(lines, 1) if line_text(text, n)]
    return list(zip([f"{source}:{n}" for n in given], iter_trees(lines, source), strict=True))


def _stdin_lines() -> list[str]:
    """Standard input's lines, split as ``read_trees`` splits a file's."""
    from treeqa.data.tree import not_utf8_lines

    data = sys.stdin.buffer.read()
    try:
        return io.StringIO(data.decode("utf-8"), newline="").readlines()
    except UnicodeDecodeError as err:
        raise not_utf8_lines(io.BytesIO(data), "<stdin>", err) from err


def _lines_of_trees(path: Path, count: int) -> list[str]:
    """``path:line`` of each of the ``count`` trees ``read_tree_file`` read from ``path``, one
    per non-blank line (``path, tree k`` should the two ever disagree)."""
    from treeqa.data.sst import tree_lines

    numbers = tree_lines(path)
    if len(numbers) != count:
        return [f"{path}, tree {k}" for k in range(1, count + 1)]
    return [f"{path}:{n}" for n in numbers]


def run(args: argparse.Namespace) -> int:
    from treeqa.data.sst import legend, read_tree_file
    from treeqa.data.tree import iter_trees
    from treeqa.recipes.sentiment import check_predictable, load_model, predict

    check_output(args)
    # (where it came from, tree): errors name the argument or file line of the tree they are about.
    items = _numbered(args.trees, "<command line>")
    if args.input:
        if args.input == STDIN:
            name, lines = "<stdin>", _stdin_lines()
            read, empty = _numbered(lines, name), not lines
        else:
            name, trees = str(args.input), read_tree_file(args.input)
            read = list(zip(_lines_of_trees(args.input, len(trees)), trees, strict=True))
            empty = args.input.stat().st_size == 0
        if not read:  # else "nothing to predict: give ... --input FILE", which was given
            raise ValueError(f"{name}: no trees in it ({'empty' if empty else 'blank lines only'})")
        items += read
    if args.demo_examples:
        from treeqa.data.demo import DEMO_EXAMPLES

        items += [
            ("<demo examples>", tree) for tree in iter_trees(DEMO_EXAMPLES, "<demo examples>")
        ]
    if not items and not args.text:
        raise ValueError("nothing to predict: give trees, --text, --input FILE or --demo-examples")
    loaded = load_model(args.checkpoint)
    for n, text in enumerate(args.text, 1):
        try:
            items += [(f"--text {n}", tree) for tree in loaded.parse(text)]
        except ValueError as err:
            raise ValueError(f"--text {n}: {err}") from None
    # Every tree is checked before any is predicted, so an error loses no work.
    for where, tree in items:
        try:
            check_predictable(loaded, tree)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    if args.output is None and not args.json:  # the numbers alone: 2 is neutral or positive by task
        print(legend(loaded.task), file=sys.stderr)
    written = 0
    with output_file(args.output) as out:
        for at in range(0, len(items), PREDICT_BATCH):
            for result in predict(loaded, [tree for _, tree in items[at : at + PREDICT_BATCH]]):
                if out is not None:
                    out.write(json_line(result) + "\n")
                elif args.json:
                    print(json_line(result, ascii=not unicode_stdout()))
                else:
                    print(f"{result['label']}  {one_line(result['text'])}")
                    for node in result["nodes"][1:]:
                        if " " in node["words"]:
                            print(f"    {node['label']}  {one_line(node['words'])}")
                    unknown = result["unknown_words"]
                    if unknown:
                        words = ", ".join(repr(w) for w in unknown[:5])
                        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
                        print(
                            f"note: {words}{more} not in the model's vocabulary: each read as "
                            "its unknown word",
                            file=sys.stderr,
                        )
                written += 1
    if out is not None:
        print(f"wrote {written} trees to {args.output}", file=sys.stderr)
    return 0

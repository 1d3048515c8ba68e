"""``treeqa evaluate qa``: the official SQuAD scores of a predictions file or of a checkpoint.

``--gold FILE --predictions PRED.json`` scores answers in the official format;
``--checkpoint RUN --prepared DIR [--split dev]`` answers every question of a prepared split
with a trained model and scores those answers the same way.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from treeqa.cli import flags
from treeqa.cli.common import check_written, emit_json, refuse_unused, subparser

EXAMPLE = (
    "treeqa evaluate qa --gold dev-v1.1.json --predictions predictions.json --json\n"
    "  treeqa evaluate qa --checkpoint runs/qanet --prepared runs/squad_v1 --split dev"
    " --write-predictions predictions.json"
)


USAGE = (
    "%(prog)s [-h] --gold FILE --predictions FILE [--squad-version {v1.1,v2.0}]\n"
    "              [--na-probs FILE [--na-prob-thresh P]] [--json]\n"
    "       %(prog)s [-h] --checkpoint RUN --prepared DIR [--split {train,dev}]\n"
    "              [--write-predictions FILE] [--json]"
)
"""A line for each way to use it, as in ``treeqa evaluate``."""
DESCRIPTION = (
    "The official SQuAD v1.1 / v2.0 exact match and F1: of a predictions file against the gold "
    "file, or of a QANet checkpoint's answers to every question of a prepared split. "
    "Sentiment: `treeqa evaluate sentiment --help`."
)


def add_parser(subparsers: Any, help: str) -> argparse.ArgumentParser:
    parser = subparser(
        subparsers,
        "evaluate",
        help,
        EXAMPLE,
        description=DESCRIPTION,
        prog=flags.usage_prog("evaluate", "qa"),
        usage=USAGE,
    )
    files = parser.add_argument_group("score a predictions file")
    files.add_argument(
        "--gold", type=Path, metavar="FILE", help="SQuAD file, .json or .json.gz (default: none)"
    )
    files.add_argument(
        "--predictions",
        type=Path,
        metavar="FILE",
        help="JSON object {question id: answer text} (default: none)",
    )
    files.add_argument(
        "--squad-version",
        choices=("v1.1", "v2.0"),
        help="score as this version (default: the gold file's own)",
    )
    files.add_argument(
        "--na-probs",
        type=Path,
        metavar="FILE",
        help="v2.0: JSON {question id: no-answer score} for the official best-threshold search "
        "(default: none)",
    )
    files.add_argument(
        "--na-prob-thresh",
        type=threshold,
        metavar="P",
        help="with --na-probs, answer nothing where the no-answer score is above this, as the "
        "official v2.0 script does (default: 1.0)",
    )
    model = parser.add_argument_group("score a checkpoint")
    flags.add_checkpoint(model, "the QANet model to score")
    model.add_argument(
        "--prepared",
        type=Path,
        metavar="DIR",
        help="with --checkpoint: a `treeqa data prepare squad` directory (default: none)",
    )
    flags.add_split(model, "dev", ("train", "dev"))  # what data prepare squad writes
    model.add_argument(
        "--write-predictions",
        type=Path,
        metavar="FILE",
        help="with --checkpoint: also write its answers, {question id: text}, here (default: none)",
    )
    flags.add_json(parser)
    parser.set_defaults(run=evaluate_main)
    return parser


def threshold(text: str) -> float:
    """An argparse type: a number, inf included; NaN is above and below nothing."""
    value = float(text)
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"expected a number, got {text}")
    return value


def evaluate_main(args: argparse.Namespace) -> int:
    from treeqa.eval.squad import (
        NoAnswerScoreError,
        evaluate_predictions,
        load_gold,
        load_na_probs,
        load_predictions,
    )

    from_file = {
        "--gold": args.gold,
        "--predictions": args.predictions,
        "--squad-version": args.squad_version,
        "--na-probs": args.na_probs,
        "--na-prob-thresh": args.na_prob_thresh,
    }
    if args.checkpoint is not None:
        refuse_unused(from_file, "with --checkpoint, which scores the model's own answers")
        return evaluate_checkpoint(args)
    from_model = {
        "--prepared": args.prepared,
        "--split": args.split,
        "--write-predictions": args.write_predictions,
    }
    refuse_unused(from_model, "without --checkpoint")
    if args.na_probs is None:
        refuse_unused({"--na-prob-thresh": args.na_prob_thresh}, "without --na-probs")
    if args.gold is None or args.predictions is None:
        raise ValueError(
            "evaluate qa needs --gold FILE and --predictions PRED.json,"
            " or --checkpoint RUN and --prepared DIR"
        )
    gold, predictions = load_gold(args.gold), load_predictions(args.predictions)
    na_probs = load_na_probs(args.na_probs) if args.na_probs is not None else None
    try:
        scores = evaluate_predictions(
            gold,
            predictions,
            version=args.squad_version,
            na_probs=na_probs,
            na_prob_thresh=1.0 if args.na_prob_thresh is None else args.na_prob_thresh,
        )
    except NoAnswerScoreError as err:
        raise ValueError(f"{args.na_probs}: {err}") from None
    except ValueError as err:  # a question the gold file leaves without an answer
        raise ValueError(f"{args.gold}: {err}") from None
    if predictions and scores["answered"] == 0:  # a score of 0 that says nothing of the model
        raise ValueError(
            f"{args.predictions}: none of its {len(predictions)} question ids is in "
            f"{args.gold} (e.g. {', '.join(repr(k) for k in list(predictions)[:3])}); "
            "the answers to another file, or not {question id: answer text}?"
        )
    if scores["unknown"]:
        print(
            f"warning: {scores['unknown']} predictions for question ids not in {args.gold.name}"
            " (ignored)",
            file=sys.stderr,
        )
    if scores["missing"]:
        examples = ", ".join(scores["missing_examples"][:3])
        print(
            f"warning: {scores['missing']} of {scores['total']} questions have no prediction and"
            f" score 0 (e.g. {examples})",
            file=sys.stderr,
        )
    print(f"{args.predictions.name} on {args.gold.name} (SQuAD {scores['version']}):")
    print(f"  exact_match {scores['exact_match']:.3f}\n  f1          {scores['f1']:.3f}")
    print(f"  total       {scores['total']} ({scores['answered']} answered)")
    print_v2_parts(scores)
    if args.json:
        emit_json(scores)
    return 0


def print_v2_parts(scores: dict[str, Any]) -> None:
    """The v2.0 HasAns/NoAns lines, and the official best-threshold line after a search."""
    for part, name in (("has_ans", "HasAns"), ("no_ans", "NoAns")):
        if part + "_total" in scores:
            print(
                f"  {name:<7} exact {scores[part + '_exact']:.3f} f1 {scores[part + '_f1']:.3f}"
                f" over {int(scores[part + '_total'])}"
            )
    if "best_f1" in scores:
        print(
            f"  best    exact {scores['best_exact']:.3f} (threshold {scores['best_exact_thresh']:.4g})"
            f" f1 {scores['best_f1']:.3f} (threshold {scores['best_f1_thresh']:.4g})"
        )


def evaluate_checkpoint(args: argparse.Namespace) -> int:
    from treeqa.recipes import qa
    from treeqa.train import checkpoint as ckpt

    if args.prepared is None:
        raise ValueError("evaluate qa --checkpoint needs --prepared DIR (the prepared SQuAD)")
    # Found out before answering every question, not after.
    check_written(
        args.write_predictions, "--write-predictions", None, args.checkpoint, args.prepared
    )
    split = args.split or "dev"
    if note := ckpt.read_instead(args.checkpoint):
        print(f"NOTE: {note}", file=sys.stderr)
    scores = qa.evaluate(args.checkpoint, args.prepared, split, args.write_predictions)
    if "words_unknown_to_model" in scores:
        print(
            f"note: {args.prepared} was prepared apart from this model; its ids are renumbered "
            f"into the model's vocabularies, and {int(scores['words_unknown_to_model'])} of its "
            "words are unknown to the model",
            file=sys.stderr,
        )
    if scores["left_out"] or scores["not_in_file"]:
        print(
            f"note: scored over the {scores['questions']} questions of the file that the {split} "
            f"split holds; {scores['left_out']} past its length limits are not in it, and its "
            f"{scores['not_in_file']} unanswerable questions made by --negatives are not scored",
            file=sys.stderr,
        )
    print(f"{args.checkpoint} on {args.prepared} {split} ({int(scores['questions'])} questions):")
    print(f"  exact_match {scores['exact_match']:.3f}\n  f1          {scores['f1']:.3f}")
    print_v2_parts(scores)
    if args.write_predictions is not None:
        print(f"  answers written to {args.write_predictions}")
    if args.json:
        emit_json(scores)
    return 0

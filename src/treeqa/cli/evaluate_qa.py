"""``treeqa evaluate qa``: the official SQuAD scores of a predictions file or of a checkpoint.

``--gold FILE --predictions PRED.json`` scores answers in the official format;
``--checkpoint RUN --prepared DIR [--split dev]`` answers every question of a prepared split
with a trained model and scores those answers the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from treeqa.cli.common import emit_json

EXAMPLE = (
    "treeqa evaluate qa --gold dev-v1.1.json --predictions predictions.json --json\n"
    "  treeqa evaluate qa --checkpoint runs/qanet --prepared runs/squad_v1 --split dev"
    " --write-predictions predictions.json"
)


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gold", type=Path, help="qa: SQuAD v1.1/v2.0 file (.json or .json.gz)")
    parser.add_argument(
        "--predictions", type=Path, help="qa: JSON object {question id: answer text}"
    )
    parser.add_argument(
        "--squad-version",
        choices=("v1.1", "v2.0"),
        help="qa: score as this version (default: the gold file's own)",
    )
    parser.add_argument(
        "--na-probs",
        type=Path,
        help="qa: v2.0, with --predictions: JSON {question id: no-answer score} for the"
        " official best-threshold search",
    )
    parser.add_argument(
        "--na-prob-thresh",
        type=float,
        default=1.0,
        help="qa: with --na-probs, answer nothing where the no-answer score is above this, as"
        " the official v2.0 script does (default 1.0)",
    )
    parser.add_argument(
        "--prepared", type=Path, help="qa: with --checkpoint, a `treeqa data prepare squad` dir"
    )
    parser.add_argument(
        "--write-predictions",
        type=Path,
        help="qa: with --checkpoint, also write its answers {question id: text} to this file",
    )
    if "--json" not in parser._option_string_actions:  # the sentiment flags may hold it
        parser.add_argument("--json", action="store_true", help="end with one JSON line")


def evaluate_main(args: argparse.Namespace) -> int:
    from treeqa.eval.squad import (
        evaluate_predictions,
        load_gold,
        load_na_probs,
        load_predictions,
    )

    if getattr(args, "seeds", None):
        raise ValueError(
            "--seeds trains and scores sentiment seeds; for QANet, train each seed "
            "with `treeqa train qa --train.seed=K` and score it with --checkpoint"
        )
    if getattr(args, "overrides", None):
        raise ValueError(f"unrecognised arguments for evaluate qa: {' '.join(args.overrides)}")
    if args.checkpoint is not None:
        return evaluate_checkpoint(args)
    if args.gold is None or args.predictions is None:
        raise ValueError(
            "evaluate qa needs --gold FILE and --predictions PRED.json,"
            " or --checkpoint RUN and --prepared DIR"
        )
    gold, predictions = load_gold(args.gold), load_predictions(args.predictions)
    na_probs = load_na_probs(args.na_probs) if args.na_probs is not None else None
    scores = evaluate_predictions(
        gold,
        predictions,
        version=args.squad_version,
        na_probs=na_probs,
        na_prob_thresh=args.na_prob_thresh,
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
    if "has_ans_total" in scores:
        for part, name in (("has_ans", "HasAns"), ("no_ans", "NoAns")):
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

    if args.prepared is None:
        raise ValueError("evaluate qa --checkpoint needs --prepared DIR (the prepared SQuAD)")
    split = args.split or "dev"
    scores = qa.evaluate(args.checkpoint, args.prepared, split, args.write_predictions)
    if "words_unknown_to_model" in scores:
        print(
            f"note: {args.prepared} was prepared apart from this model; its ids are renumbered "
            f"into the model's vocabularies, and {int(scores['words_unknown_to_model'])} of its "
            "words are unknown to the model",
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

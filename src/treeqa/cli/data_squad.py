"""``treeqa data prepare squad``: SQuAD v1.1/v2.0 JSON -> vocabularies and memory-mapped arrays."""

from __future__ import annotations

import argparse
from pathlib import Path

from treeqa.cli import flags
from treeqa.cli.common import emit_json, fraction, natural_int, positive_int

EXAMPLE = (
    "treeqa data prepare squad --train data/squad/train-v1.1.json "
    "--dev data/squad/dev-v1.1.json --vectors data/glove/glove.840B.300d.txt --out runs/squad_v1"
)


def add_prepare_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, help in (
        ("--train", "SQuAD train JSON (.json or .json.gz)"),
        ("--dev", "SQuAD dev JSON (.json or .json.gz)"),
        ("--vectors", "word vectors: GloVe text or a spaCy table"),
    ):
        parser.add_argument(flag, type=Path, required=True, metavar="FILE", help=help)
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory to write")
    limits = parser.add_argument_group("train limits (dev keeps every question)")
    limits.add_argument(
        "--context-limit", type=positive_int, default=400, metavar="N", help="tokens (default: 400)"
    )
    limits.add_argument(
        "--question-limit", type=positive_int, default=50, metavar="N", help="tokens (default: 50)"
    )
    limits.add_argument(
        "--answer-limit", type=positive_int, default=30, metavar="N", help="tokens (default: 30)"
    )
    limits.add_argument(
        "--char-limit",
        type=positive_int,
        default=16,
        metavar="N",
        help="characters kept per token, both splits (default: 16)",
    )
    parser.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip and count malformed questions and answers not in their context "
        "(default: stop with an error naming the article and question)",
    )
    parser.add_argument(
        "--negatives",
        choices=("none", "same_article"),
        default="none",
        help="same_article: add unanswerable train examples, a question paired with another "
        "paragraph of its article, with the question's id + '#neg' as their id ('#neg2', "
        "'#neg3', ... where the file has that id already) (default: none)",
    )
    parser.add_argument(
        "--negative-fraction",
        type=fraction,
        default=0.5,
        metavar="P",
        help="with --negatives: share of answerable train questions that get one (default: 0.5)",
    )
    parser.add_argument(
        "--seed",
        type=natural_int,
        default=0,
        metavar="N",
        help="random seed of the negatives and of vectors for words without one (default: 0)",
    )
    parser.add_argument(
        "--vectors-cache",
        type=Path,
        metavar="DIR",
        help="where to cache the filtered vectors (default: .treeqa-cache beside the vectors, "
        "or ~/.cache/treeqa/vectors when that folder is read-only)",
    )
    flags.add_overwrite(parser)
    flags.add_json(
        parser, "standard output is one JSON object alone, meta.json's; the text goes to stderr"
    )


def prepare_main(args: argparse.Namespace) -> int:
    from treeqa.data.squad_prepare import Limits, prepare_squad

    limits = Limits(args.context_limit, args.question_limit, args.answer_limit, args.char_limit)
    meta = prepare_squad(
        args.train,
        args.dev,
        args.vectors,
        args.out,
        limits=limits,
        skip_bad=args.skip_bad,
        negatives=None if args.negatives == "none" else args.negatives,
        negative_fraction=args.negative_fraction,
        seed=args.seed,
        vectors_cache=args.vectors_cache,
        overwrite=args.overwrite,
        log=print,
    )
    for split, s in meta["splits"].items():
        dropped = ", ".join(f"{k} {v}" for k, v in s["dropped"].items()) or "none"
        skipped = ", ".join(f"{k}: {v}" for k, v in s["skipped"].items()) or "none"
        if s["unreadable"]:
            skipped += " (questions); " + ", ".join(f"{k}: {v}" for k, v in s["unreadable"].items())
        print(
            f"{split} ({s['version']}): {s['examples']:,} examples from {s['questions_read']:,} "
            f"questions, {s['paragraphs']:,} paragraphs; dropped {dropped}; skipped {skipped}; "
            f"{s['unanswerable_examples']:,} unanswerable ({s['negatives']:,} made); "
            f"{s['answers_not_whole_tokens']:,} of {s['answers']:,} answers not whole tokens"
        )
    print(meta["vocab"]["vectors"]["summary"])
    if args.json:
        emit_json(meta)
    return 0

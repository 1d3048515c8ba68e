"""``treeqa data``: inspect, generate and download datasets."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from treeqa.cli import data_squad
from treeqa.cli.common import emit_json, subparser


def add_parser(subparsers: Any) -> None:
    parser = subparser(
        subparsers,
        "data",
        "Inspect, generate, download and prepare datasets.",
        "treeqa data stats data/sst/train.txt",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    stats = subparser(
        actions,
        "stats",
        "Trees, nodes, tokens, labels and heights of SST-format files.",
        "treeqa data stats data/sst --json",
    )
    stats.add_argument(
        "path", type=Path, help="a tree file, or a directory with train/dev/test.txt"
    )
    stats.add_argument("--json", action="store_true", help="end with one JSON line")
    stats.set_defaults(run=run_stats)

    demo = subparser(
        actions,
        "demo",
        "Write the embedded demo treebank as SST-format files.",
        "treeqa data demo --out data/demo",
    )
    demo.add_argument(
        "--out", type=Path, required=True, help="directory to write train/dev/test.txt into"
    )
    demo.set_defaults(run=run_demo)

    download = subparser(
        actions,
        "download",
        "Fetch official SST, SQuAD or GloVe files (resumable, verified).",
        "treeqa data download sst --dir data",
    )
    download.add_argument("name", help="sst | squad | squad2 | glove | glove6b")
    download.add_argument(
        "--dir", type=Path, default=Path("data"), help="destination directory (default: data)"
    )
    download.add_argument(
        "--base-url", default=None, help="mirror to fetch from instead of the official hosts"
    )
    download.set_defaults(run=run_download)

    prepare = subparser(actions, "prepare", "Featurise a dataset for training.", data_squad.EXAMPLE)
    datasets = prepare.add_subparsers(dest="dataset", required=True, metavar="DATASET")
    squad = subparser(
        datasets,
        "squad",
        "SQuAD v1.1/v2.0 JSON -> vocabularies, word vectors and memory-mapped arrays.",
        data_squad.EXAMPLE,
    )
    data_squad.add_prepare_arguments(squad)
    squad.set_defaults(run=data_squad.prepare_main)


def run_stats(args: argparse.Namespace) -> int:
    from treeqa.data import sst
    from treeqa.data.tree import read_trees

    paths = (
        [sst.split_path(args.path, s) for s in sst.SPLITS] if args.path.is_dir() else [args.path]
    )
    report = {}
    for path in paths:
        s = sst.stats(read_trees(path))
        report[path.stem] = s.as_dict()
        hist = " ".join(f"{k}:{v}" for k, v in s.labels.items())
        roots = " ".join(f"{k}:{v}" for k, v in s.root_labels.items())
        print(
            f"{path}: {s.trees:,} trees, {s.nodes:,} nodes, {s.tokens:,} tokens; "
            f"height mean {s.height_mean:.1f} max {s.height_max}\n  node labels {hist}\n  root labels {roots}"
        )
    if args.json:
        emit_json(report)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from treeqa.data.demo import write_demo

    for split, path in write_demo(args.out).items():
        print(f"{split}: {path}")
    return 0


def run_download(args: argparse.Namespace) -> int:
    from treeqa.data.download import download

    for path in download(args.name, args.dir, base_url=args.base_url):
        print(path)
    return 0

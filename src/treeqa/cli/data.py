"""``treeqa data``: inspect, generate and download datasets."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

from treeqa.cli import data_squad, flags
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
        "path",
        type=Path,
        metavar="PATH",
        help="a tree file, or a directory with train/dev/test.txt (or .jsonl)",
    )
    flags.add_json(stats)
    stats.set_defaults(run=run_stats)

    demo = subparser(
        actions,
        "demo",
        "Write the embedded demo treebank as SST-format files.",
        "treeqa data demo --out data/demo",
    )
    demo.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="directory to write train/dev/test.txt into",
    )
    demo.set_defaults(run=run_demo)

    download = subparser(
        actions,
        "download",
        "Fetch official SST, SQuAD or GloVe files (resumable, verified).",
        "treeqa data download sst --dir data",
    )
    download.add_argument(
        "name",
        metavar="NAME",
        help="sst, squad (v1.1), squad2 (v2.0), glove (840B) or glove6b (6B)",
    )
    download.add_argument(
        "--dir",
        type=Path,
        default=Path("data"),
        metavar="DIR",
        help="destination directory (default: data)",
    )
    download.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="mirror to fetch from instead of the official hosts "
        "(default: $TREEQA_DOWNLOAD_BASE, else the official hosts)",
    )
    download.set_defaults(run=run_download)
    _add_prepare(actions)


def _add_prepare(actions: Any) -> None:
    """``treeqa data prepare squad`` and ``treeqa data prepare sst-dependency``."""
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
    dependency = subparser(
        datasets,
        "sst-dependency",
        "SST trees -> spaCy dependency parses with the SST labels projected (train/dev/test.jsonl).",
        "treeqa data prepare sst-dependency --sst data/sst --out data/sst-dep --pipeline en_core_web_sm",
    )
    dependency.add_argument(
        "--sst",
        type=Path,
        required=True,
        metavar="DIR",
        help="directory with SST's train/dev/test.txt",
    )
    dependency.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="directory to write into"
    )
    dependency.add_argument(
        "--pipeline",
        default="en_core_web_sm",
        metavar="NAME",
        help="trained spaCy pipeline that parses (default: en_core_web_sm)",
    )
    flags.add_overwrite(dependency)
    flags.add_json(dependency)
    dependency.set_defaults(run=run_prepare_dependency)


def run_stats(args: argparse.Namespace) -> int:
    from treeqa.data import sst

    if not args.path.exists():
        raise FileNotFoundError(
            f"{args.path}: no such file or directory (expected a tree file, or a folder of "
            "train/dev/test.txt or .jsonl)"
        )
    paths = [args.path]
    if args.path.is_dir():  # a folder of train and dev alone has no test split to count
        has_test = any((args.path / f"test{x}").exists() for x in (".txt", ".jsonl"))
        paths = [sst.split_path(args.path, s) for s in sst.SPLITS if s != "test" or has_test]
    report = {}
    for path in paths:
        s = sst.stats(sst.read_tree_file(path))
        report[path.stem] = s.as_dict()
        hist = " ".join(f"{k}:{v}" for k, v in s.labels.items()) or "(none)"
        roots = " ".join(f"{k}:{v}" for k, v in s.root_labels.items()) or "(none)"
        if not s.trees:
            print(f"warning: {path} holds no tree (empty, or blank lines only)", file=sys.stderr)
        print(
            f"{path}: {s.trees:,} trees, {s.nodes:,} nodes, {s.tokens:,} tokens; "
            f"height mean {s.height_mean:.1f} max {s.height_max}\n  node labels {hist}\n  root labels {roots}"
        )
    if args.json:
        emit_json(report)
    return 0


def run_prepare_dependency(args: argparse.Namespace) -> int:
    from treeqa.data.dependency import convert_sst

    meta = convert_sst(args.sst, args.out, args.pipeline, overwrite=args.overwrite)
    if args.json:
        emit_json(meta)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from treeqa.data.demo import write_demo

    for split, path in write_demo(args.out).items():
        print(f"{split}: {path}")
    return 0


def run_download(args: argparse.Namespace) -> int:
    from treeqa.data.download import DownloadError, DownloadInterrupted, download

    prog = "treeqa data download"
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always")
        try:
            paths = download(args.name, args.dir, base_url=args.base_url)
        except (DownloadError, ValueError) as err:  # names the URL or path, and what was kept
            print(f"{prog}: error: {err}", file=sys.stderr)
            return 2
        except OSError as err:  # a disk that fills or turns read-only between our own checks
            print(
                f"{prog}: error: {err.filename or args.dir}: {err.strerror or err}", file=sys.stderr
            )
            return 2
        except KeyboardInterrupt as err:
            # The shell's convention for Ctrl-C: 128 + SIGINT, with no traceback.
            said = str(err) if isinstance(err, DownloadInterrupted) else "interrupted"
            print(f"{prog}: {said}", file=sys.stderr)
            return 130
        finally:
            for note in notes:  # e.g. a file that failed verification was kept as <name>.old
                print(f"{prog}: warning: {note.message}", file=sys.stderr)
    for path in paths:
        print(path)
    return 0

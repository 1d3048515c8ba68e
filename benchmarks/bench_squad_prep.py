"""Wall time and peak memory of ``treeqa data prepare squad`` on the full SQuAD v1.1 train+dev.

The preparation runs as a child process (the real CLI), so its peak RSS is measured alone:
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``. The vectors cache goes to a fresh temporary
folder, so the GloVe file is parsed every run (a cold start). If a v2.0 dev file is next to the
data, it is also read (not timed) to check the v2.0 reader on real data.

    python benchmarks/bench_squad_prep.py [--data DIR] [--vectors FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model  # benchmarks/machine.py (scripts run from this folder)

REPO = Path(__file__).resolve().parents[1]


def find(folder: Path, *patterns: str) -> Path:
    for pattern in patterns:
        if hits := sorted(folder.glob(pattern)):
            return hits[0]
    raise SystemExit(f"none of {', '.join(patterns)} in {folder}")


def squad_file(folder: Path, stem: str) -> Path:
    # *.json(.gz) only: the shared folder also holds *.jsonl.gz side files
    return find(folder, f"{stem}*.json.gz", f"{stem}*.json")


def main() -> int:
    default = Path(os.environ.get("TREEQA_DATA", REPO.parent / "shared" / "data")) / "squad"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", type=Path, default=default, help=f"SQuAD folder (default {default})"
    )
    parser.add_argument(
        "--vectors", type=Path, help="default: GloVe 50d subset in <data>/../vectors"
    )
    parser.add_argument("--out", type=Path, help="prepared directory (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args()
    train, dev = squad_file(args.data, "train-v1.1"), squad_file(args.data, "dev-v1.1")
    vectors = args.vectors or find(args.data.parent / "vectors", "glove.6B.50d*.txt*")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "squad"
        command = [
            sys.executable, "-m", "treeqa", "data", "prepare", "squad", "--train", str(train),
            "--dev", str(dev), "--vectors", str(vectors), "--out", str(out),
            "--vectors-cache", str(Path(tmp) / "cache"), "--overwrite", "--json",
        ]  # fmt: skip
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if done.returncode:
            sys.stderr.write(done.stderr)
            return done.returncode
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        meta = json.loads(done.stdout.strip().splitlines()[-1])
    result = {
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # ru_maxrss is in KiB on Linux
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "splits": {
            s: {k: v for k, v in m.items() if k != "source"} for s, m in meta["splits"].items()
        },
        "vocab": {k: meta["vocab"][k] for k in ("words", "chars", "vector_dim")},
    }
    dev2 = sorted(args.data.glob("dev-v2.0*.json.gz")) + sorted(args.data.glob("dev-v2.0*.json"))
    if dev2:
        from treeqa.data.squad import ReadStats, iter_articles

        stats = ReadStats()
        for _ in iter_articles(dev2[0], stats=stats):
            pass
        result["v2_dev"] = {"questions": stats.questions, "unanswerable": stats.unanswerable,
                            "version": stats.squad_version}  # fmt: skip
    train_meta = result["splits"]["train"]
    print(f"prepare squad v1.1 train+dev: {wall:.1f} s wall, {result['cpu_s']} s CPU, "
          f"peak RSS {result['peak_rss_mb']:.0f} MB ({result['nproc']} x {result['cpu']}, "
          f"load {result['load_avg_1m']})")  # fmt: skip
    print(f"train: {train_meta['examples']:,} of {train_meta['questions_read']:,} kept, "
          f"dropped {train_meta['dropped']}; dev: {result['splits']['dev']['examples']:,} kept")  # fmt: skip
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

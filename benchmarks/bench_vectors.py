"""Cold versus cached ``load_vectors`` on real vectors, with the SST vocabulary as keys.

Each round makes a fresh cache folder in a temporary directory, times the first load (reads
and filters the vectors file, writes the cache) and the second (reads the cache), then repeats
the cached load a few times. The goal is a second load at least 50x faster than the first.

    python benchmarks/bench_vectors.py
    python benchmarks/bench_vectors.py \\
        --vectors "$TREEQA_DATA/vectors/en_core_web_md-3.8.0.key2row.tsv.gz" --json

Data comes from ``--vectors``/``--sst``, else ``$TREEQA_DATA``, else ``../shared/data``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from treeqa.data.tree import read_trees, unescape_ptb
from treeqa.data.vectors import Vectors, load_vectors

DATA = Path(
    os.environ.get("TREEQA_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
)


def sst_keys(sst: Path) -> list[str | None]:
    """Row 0 is padding; then every distinct de-escaped leaf of train, dev and test."""
    words = {
        unescape_ptb(word)
        for split in ("train", "dev", "test")
        for tree in read_trees(sst / f"{split}.txt")
        for word in tree.leaves
    }
    return [None, *sorted(words)]


def timed(path: Path, keys: list[str | None], cache: Path) -> tuple[float, Vectors]:
    start = time.perf_counter()
    vectors = load_vectors(path, keys, cache_dir=cache)
    return time.perf_counter() - start, vectors


def timed_crc32(*arrays: np.ndarray) -> float:
    start = time.perf_counter()
    for array in arrays:
        zlib.crc32(array.data)
    return time.perf_counter() - start


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return f"{names[0] if names else platform.processor()} x {os.cpu_count()}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--vectors", type=Path, default=DATA / "vectors" / "glove.6B.50d.sst-squad-subset.txt.gz"
    )
    parser.add_argument(
        "--sst", type=Path, default=DATA / "sst", help="folder with train/dev/test.txt"
    )
    parser.add_argument("--rounds", type=int, default=3, help="cold loads, each with a fresh cache")
    parser.add_argument("--repeat", type=int, default=5, help="cached loads after each second load")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object on the last line"
    )
    args = parser.parse_args()

    keys = sst_keys(args.sst)
    cold, second, cached = [], [], []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp) / "cache"
            t_cold, first = timed(args.vectors, keys, cache)
            t_second, again = timed(args.vectors, keys, cache)
            # A fast load is worthless unless it returns the same arrays.
            assert np.array_equal(first.matrix, again.matrix) and np.array_equal(
                first.found, again.found
            )
            cold.append(t_cold)
            second.append(t_second)
            cached.append(
                statistics.median(timed(args.vectors, keys, cache)[0] for _ in range(args.repeat))
            )

    print(
        f"vectors: {args.vectors.name}  keys: {len(keys)} (SST leaves + padding)  D: {first.matrix.shape[1]}"
    )
    print(f"machine: {cpu_name()}, Python {platform.python_version()}, numpy {np.__version__}")
    print(f"coverage: {first.report.summary()}")
    print(f"{'round':>6} {'cold s':>9} {'2nd load ms':>12} {'cached ms':>10} {'cold/2nd':>9}")
    for i, (c, s, k) in enumerate(zip(cold, second, cached, strict=True), start=1):
        print(f"{i:>6} {c:>9.3f} {1e3 * s:>12.2f} {1e3 * k:>10.2f} {c / s:>8.0f}x")
    med = {
        name: statistics.median(v)
        for name, v in (("cold", cold), ("second", second), ("cached", cached))
    }
    ratio = med["cold"] / med["second"]
    print(
        f"{'median':>6} {med['cold']:>9.3f} {1e3 * med['second']:>12.2f} {1e3 * med['cached']:>10.2f} "
        f"{ratio:>8.0f}x   (goal: >= 50x)"
    )
    # What a cached load spends verifying the arrays it read against the CRC-32 in the JSON.
    crc = statistics.median(
        timed_crc32(first.matrix, first.found) for _ in range(max(args.repeat, 5))
    )
    mb = (first.matrix.nbytes + first.found.nbytes) / 1e6
    print(
        f"CRC-32 of the cached arrays ({mb:.1f} MB): {1e3 * crc:.2f} ms ({mb / 1e3 / crc:.1f} GB/s)"
    )
    if args.json:
        result = {
            "vectors": args.vectors.name,
            "keys": len(keys),
            "dim": int(first.matrix.shape[1]),
            "found": int(first.found.sum()),
            "cold_s": cold,
            "second_s": second,
            "cached_median_s": cached,
            "ratio_cold_to_second": ratio,
            "ratio_cold_to_cached": med["cold"] / med["cached"],
            "crc32_s": crc,
            "machine": cpu_name(),
        }
        print(json.dumps(result))


if __name__ == "__main__":
    main()

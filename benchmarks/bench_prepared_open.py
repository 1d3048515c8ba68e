"""What opening a prepared SQuAD split costs, and the share of it spent on the CRC-32 check.

``PreparedSplit`` memory-maps a split's arrays, checks that they fit together (offsets rising,
ids inside the vocabularies, answer spans inside their contexts), then reads each array file
once more to check it against the CRC-32 that meta.json recorded when it was prepared (a
folder prepared before that is not checked). Both are timed here, with the files in the page
cache (each open is repeated; the first one read them from disk):

    treeqa data prepare squad --train "$TREEQA_DATA/squad/train-v1.1.reconstructed.json.gz" \\
        --dev "$TREEQA_DATA/squad/dev-v1.1.reconstructed.json.gz" \\
        --vectors "$TREEQA_DATA/vectors/glove.6B.50d.sst-squad-subset.txt.gz" --out DIR
    python benchmarks/bench_prepared_open.py DIR [--repeat 7] [--flips 400]

With ``--flips N`` it also damages a copy of the dev split N times, one random byte of one
array's data each time (an array picked in proportion to its size, the byte XORed with 1-255,
seeded), and opens it: once checked by the ranges alone (meta.json's CRC-32s removed, as in a
folder prepared before they were recorded), once with the CRC-32s too. "silent" opens read
other token ids, characters, spans or answers without a word.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from machine import cpu_model  # benchmarks/machine.py (scripts run from this folder)
from treeqa.data.squad_prepare import crc32
from treeqa.data.squad_prepared import _ARRAYS, PreparedSplit, load_meta


def median_s(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def crc_arrays(folder: Path) -> None:
    for name in _ARRAYS:
        with (folder / f"{name}.npy").open("rb") as f:
            crc32(f)


def flips(prepared: Path, n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        shutil.copytree(prepared / "dev", copy / "dev")
        meta = json.loads((prepared / "meta.json").read_text(encoding="utf-8"))
        files = [copy / "dev" / f"{name}.npy" for name in _ARRAYS]
        sizes = [f.stat().st_size for f in files]
        for label, crcs in (("ranges only", None), ("ranges + CRC-32", meta.get("crc32"))):
            if label != "ranges only" and crcs is None:
                print(f"{label}: meta.json records no CRC-32s; prepare the folder again")
                continue
            kept = {k: v for k, v in meta.items() if k != "crc32"}
            # format version 1: a folder from before the CRC-32s, opened with range checks only
            text = json.dumps(kept | ({"crc32": crcs} if crcs else {"format_version": 1}))
            (copy / "meta.json").write_text(text, encoding="utf-8")
            rng, silent = random.Random(0), Counter[str]()
            for _ in range(n):
                path = rng.choices(files, sizes)[0]
                whole = path.read_bytes()
                data = bytearray(whole)
                at = rng.randrange(128, len(data))  # past the .npy header: the numbers
                data[at] ^= rng.randint(1, 255)
                path.write_bytes(data)
                try:
                    PreparedSplit(copy, "dev")
                    silent[path.stem] += 1
                except ValueError:
                    pass
                path.write_bytes(whole)
            shown = ", ".join(f"{k} {v}" for k, v in silent.most_common()) or "none"
            print(
                f"{label}: {sum(silent.values())} of {n} damaged dev splits opened silently ({shown})"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prepared", type=Path, help="a folder `treeqa data prepare squad` wrote")
    parser.add_argument("--repeat", type=int, default=7, help="opens per split (median)")
    parser.add_argument("--flips", type=int, default=0, help="damaged copies of dev to open")
    args = parser.parse_args()
    checked = "crc32" in load_meta(args.prepared)
    print(f"machine: {cpu_model()} x {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    print(
        f"{args.prepared}: meta.json records "
        + ("CRC-32s: the open includes the check" if checked else "no CRC-32s: opens unchecked")
    )
    print(f"{'split':>6} {'arrays MB':>10} {'open ms':>8} {'CRC-32 ms':>10} {'GB/s':>5}")
    for split in ("train", "dev"):
        folder = args.prepared / split
        size = sum((folder / f"{name}.npy").stat().st_size for name in _ARRAYS)
        PreparedSplit(args.prepared, split)  # from disk into the page cache
        opened = median_s(lambda split=split: PreparedSplit(args.prepared, split), args.repeat)
        crc = median_s(lambda folder=folder: crc_arrays(folder), args.repeat)
        print(
            f"{split:>6} {size / 1e6:>10.1f} {1e3 * opened:>8.0f} {1e3 * crc:>10.0f} "
            f"{size / 1e9 / crc:>5.1f}"
        )
    files = [p for p in sorted(args.prepared.rglob("*")) if p.is_file() and p.name != "meta.json"]
    size = sum(p.stat().st_size for p in files)
    start = time.perf_counter()
    for path in files:
        with path.open("rb") as f:
            crc32(f)
    took = time.perf_counter() - start
    print(f"CRC-32 of all {len(files)} files ({size / 1e6:.0f} MB), as prepare adds: {took:.2f} s")
    if args.flips:
        flips(args.prepared, args.flips)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Subnormal weights and training speed on the CPU: one SST epoch of each tree model at its
paper config, with subnormal floats flushed to zero (as the ``treeqa`` command sets it) and
without, side by side in fresh processes (torch's CPU threads take the flag as it is when they
start), alternating, twice each. Prints the epoch's examples/s and time, and how many weights
were subnormal at the end of the unflushed runs.

    python benchmarks/bench_denormals.py --data "$TREEQA_DATA/sst" \\
        --vectors "$TREEQA_DATA/vectors/glove.6B.50d.sst-squad-subset.txt.gz"
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

RUN = """
import sys, torch
torch.set_flush_denormal({flush})
from treeqa.cli.main import main
code = main(sys.argv[1:])
from safetensors.torch import load_file
weights = load_file(sys.argv[sys.argv.index("--out") + 1] + "/last.safetensors")
tiny = torch.finfo(torch.float32).tiny
print("SUBNORMAL", sum(int(((w.abs() < tiny) & (w != 0)).sum()) for w in weights.values()
      if w.dtype == torch.float32), file=sys.stderr)
sys.exit(code)
"""


def epoch(config: str, flush: bool, data: str, vectors: str, out: Path) -> dict[str, float]:
    argv = [sys.executable, "-c", RUN.format(flush=flush), "train", "sentiment"]
    argv += ["--config", config, "--data", data, "--vectors", vectors, "--epochs", "1"]
    argv += ["--health", "off", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "epoch_time_s" in r][-1]
    subnormal = next(
        int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("SUBNORMAL")
    )
    return {"ex_s": last["examples_per_s"], "s": last["epoch_time_s"], "subnormal": subnormal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="an SST folder (train/dev/test.txt)")
    parser.add_argument("--vectors", required=True)
    parser.add_argument(
        "--configs", nargs="+", default=["tree_lstm_fine", "childsum_fine", "tree_gru_fine"]
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("config            flushed  ex/s (2 runs)      epoch s        subnormal weights")
        for config in args.configs:
            runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
            for i in range(4):
                flush = i % 2 == 1
                runs[flush].append(
                    epoch(config, flush, args.data, args.vectors, Path(tmp) / f"{config}{i}")
                )
            for flush, got in runs.items():
                rates = " ".join(f"{r['ex_s']:7.0f}" for r in got)
                times = " ".join(f"{r['s']:5.2f}" for r in got)
                print(
                    f"{config:17s} {'yes' if flush else 'no ':7s}  {rates}    {times}    {got[-1]['subnormal']:,}"
                )
            plain = sum(r["ex_s"] for r in runs[False]) / 2
            flushed = sum(r["ex_s"] for r in runs[True]) / 2
            print(f"{config:17s} flushed / not: {flushed / plain:.2f}x")


if __name__ == "__main__":
    main()

"""The doctor's cost on a script of many tiny operators: whole runs, with and without it.

Runs ``reinforce_cartpole.py`` (REINFORCE, one optimiser step per episode of up to 400 policy
forwards) as plain ``python``, under ``treeqa doctor`` with this checkout's code and, with
``--against SRC`` (the ``src`` folder of another checkout), under that code's doctor, the three
alternated ``--repeats`` times so that each meets the same machine. Prints each run's wall time,
peak RSS and the doctor's warning- and error-level findings.

    python benchmarks/bench_doctor_many_ops.py --repeats 3 --against ../before/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "reinforce_cartpole.py"


def one_run(src: Path | None, episodes: int) -> dict[str, object]:
    """One run: plain python (``src`` None) or the doctor with the code in ``src``."""
    script = [str(SCRIPT), "--episodes", str(episodes)]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        if src is None:
            cmd, env = [sys.executable, *script], dict(os.environ)
        else:
            doctor = ["-m", "treeqa", "doctor", "--json", str(report), "--", "python"]
            cmd, env = [sys.executable, *doctor, *script], {**os.environ, "PYTHONPATH": str(src)}
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr = proc.stderr.read().decode() if proc.stderr else ""
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr[-2000:]}")
        findings = json.loads(report.read_text())["findings"] if src is not None else []
    return {
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # KB on Linux
        "findings": [f["code"] for f in findings if f["severity"] != "info"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--against", type=Path, help="another checkout's src folder")
    args = parser.parse_args()
    sides: dict[str, Path | None] = {"python": None, "doctor": HERE.parent / "src"}
    if args.against is not None:
        sides["doctor (against)"] = args.against.resolve()
    runs: dict[str, list[dict[str, object]]] = {name: [] for name in sides}
    for repeat in range(1, args.repeats + 1):
        for name, src in sides.items():
            run = one_run(src, args.episodes)
            runs[name].append(run)
            print(
                f"{repeat} {name:<17} {run['wall_s']:7.2f} s {run['peak_rss_mb']:7.1f} MB "
                f"{','.join(run['findings']) or '-'}",
                flush=True,
            )  # type: ignore[arg-type]
    plain = statistics.median(float(r["wall_s"]) for r in runs["python"])  # type: ignore[arg-type]
    for name, done in runs.items():
        wall = statistics.median(float(r["wall_s"]) for r in done)  # type: ignore[arg-type]
        rss = statistics.median(float(r["peak_rss_mb"]) for r in done)  # type: ignore[arg-type]
        print(f"median {name:<17} {wall:7.2f} s ({wall / plain:.2f}x python) {rss:7.1f} MB")


if __name__ == "__main__":
    main()

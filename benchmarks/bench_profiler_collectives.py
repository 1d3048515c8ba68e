"""A profiler window stopped while a collective's profiler range is still open on gloo's thread.

ProcessGroupGloo completes a collective's future (which DDP waits on) before its worker thread
ends the collective's ``record_function`` range (``gloo:all_reduce``). A profiler stopped in
that gap frees the events the range ends in, and the worker thread then writes its end time
into freed heap: under valgrind, "Invalid write of size 8" in ``onFunctionExit`` from
``c10d::Work::finish``, into a block ``RecordQueue::getRecords`` freed. The doctor's windows
stop at the optimiser step, right after the backward's all-reduces were waited on; on a loaded
host the worker thread is sometimes preempted in the gap, and a rank of ``treeqa doctor --
torchrun ... clean_ddp.py`` died with glibc's ``malloc(): unsorted double linked list
corrupted``.

Part 1 (``gap``): one process, a gloo group of one, ``--steps`` all-reduces of a DDP-sized
gradient each waited through a ``then`` future as DDP's comm hook does, with the worker thread
held 5 ms after the future completes (a preempted thread, made certain); a profiler around
each. Per way of profiling, in a fresh process with glibc's heap checks on: the stops that fell
in the gap, those whose profile held the still-open range (an end written into freed heap), and
how the process ended. ``torch.profiler`` is how the windows started the profiler before;
``window`` is ``ProfileWindow`` as the doctor runs it; ``none`` profiles nothing.

Part 2 (``runs``): ``clean_ddp.py`` under ``torchrun --nproc-per-node 2``, ``--runs`` times
with ``treeqa doctor`` and as many without, beside ``--load`` busy-loop processes, heap checks
on; how each ended. Results go to ``benchmarks/results/profiler-collectives.md`` and ``.json``:

    python benchmarks/bench_profiler_collectives.py --steps 200 --runs 5 --load 2
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCRIPT = ROOT / "tests" / "health" / "scripts" / "clean_ddp.py"
CHECKS = {"MALLOC_CHECK_": "3", "GLIBC_TUNABLES": "glibc.malloc.check=3", "OMP_NUM_THREADS": "1"}
WAYS = ("torch.profiler", "window", "none")


def gap(way: str, steps: int) -> dict[str, int]:
    """Part 1 in this process: (stops in the gap, of those with the open range recorded)."""
    import torch.distributed as dist

    from treeqa.health.profile import ProfileWindow

    store = dist.FileStore(tempfile.mktemp(prefix="bench-store-"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    grad = torch.randn(272_898)  # clean_ddp.py's parameters: 16*512 + 512*512 + 512*2 + biases
    in_gap = open_at_stop = 0
    for step in range(steps):
        window, prof = ProfileWindow(steps=1), None
        if way == "window":
            window.schedule(step)
            window.begin(step)
        elif way == "torch.profiler":
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        work = dist.all_reduce(grad, async_op=True)
        done = work.get_future().then(lambda f: f.value()[0] / 1)  # as DDP's comm hook
        work.get_future().add_done_callback(lambda f: time.sleep(0.005))
        done.wait()
        stopped_early = not work.is_completed()
        names: list[str] = []
        if prof is not None:
            prof.__exit__(None, None, None)
            names = [e.name() for e in prof.profiler.kineto_results.events()]
        elif way == "window":
            window.end(step)  # its events are read inside; the open range is never recorded
        work.wait()
        in_gap += stopped_early
        open_at_stop += stopped_early and "gloo:all_reduce" in names
    dist.destroy_process_group()
    return {"steps": steps, "stops_in_gap": in_gap, "open_range_at_stop": open_at_stop}


def ended(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit {code}"


def run_gap(way: str, steps: int) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--gap-child", way, "--steps", str(steps)]
    env = {**os.environ, **CHECKS, "KINETO_LOG_LEVEL": "6"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    lines = proc.stdout.strip().splitlines()
    counts = json.loads(lines[-1]) if proc.returncode == 0 and lines else {}
    return {"way": way, "ended": ended(proc.returncode), **counts}


def run_ddp(doctor: bool) -> dict[str, object]:
    cmd = ["torchrun", "--standalone", "--nproc-per-node", "2", str(SCRIPT)]
    if doctor:
        cmd = [sys.executable, "-m", "treeqa", "doctor", "--every", "10", "--", *cmd]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    began = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**env, **CHECKS}, timeout=600)
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "malloc" in line or "exitcode" in line]
    return {
        "doctor": doctor,
        "ended": ended(proc.returncode),
        "seconds": round(time.perf_counter() - began, 1),
        "heap_messages": lines[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="profiled all-reduces per way")
    parser.add_argument("--runs", type=int, default=5, help="DDP runs with and without doctor")
    parser.add_argument("--load", type=int, default=2, help="busy-loop processes beside runs")
    parser.add_argument("--gap-child", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.gap_child:
        print(json.dumps(gap(args.gap_child, args.steps)))
        return
    gaps = [run_gap(way, args.steps) for way in WAYS]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        runs = [run_ddp(doctor) for _ in range(args.runs) for doctor in (True, False)]
    finally:
        for p in busy:
            p.kill()
    setup = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "torch": torch.__version__,
        "command": "python benchmarks/bench_profiler_collectives.py "
        f"--steps {args.steps} --runs {args.runs} --load {args.load}",
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "profiler-collectives.json").write_text(
        json.dumps({"setup": setup, "gap": gaps, "runs": runs}, indent=1) + "\n"
    )
    lines = [
        "# Profiler windows stopped while a collective's range is open on gloo's thread",
        "",
        f"{setup['date']}, {setup['nproc']} CPUs, torch {setup['torch']}; `{setup['command']}`;"
        " glibc heap checks on (`MALLOC_CHECK_=3`).",
        "",
        "| profiled by | steps | stops in the gap | open range at stop | process |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for g in gaps:
        row = [g["way"], g.get("steps", "-"), g.get("stops_in_gap", "-")]
        row += [g.get("open_range_at_stop", "-"), g["ended"]]
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    lines += ["", "| clean_ddp.py under torchrun | runs | ended |", "| --- | ---: | --- |"]
    for doctor in (True, False):
        mine = [r for r in runs if r["doctor"] is doctor]
        endings = sorted({str(r["ended"]) for r in mine})
        counts = ", ".join(f"{sum(r['ended'] == e for r in mine)} {e}" for e in endings)
        name = "with treeqa doctor" if doctor else "without"
        lines.append(f"| {name} | {len(mine)} | {counts} |")
    (RESULTS / "profiler-collectives.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

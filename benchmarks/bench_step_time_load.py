"""``step-time-regression`` on corpus scripts while other processes load the CPU part-way.

Each run executes a corpus script under the doctor in this process (as
``tests/health/test_corpus.py`` does: one torch thread, ``--every 10``), while ``--busy``
processes start spinning part-way through it (at a random 10-70% of the script's quiet run
time), so the late steps share the cores; ``--early`` more spin from the start. With
``--suite`` the load arriving is part of this checkout's own test suite instead (``pytest
tests/train tests/health/test_forks.py``: imports, torchrun pairs, forked and spawned trainers),
stopped when the run ends; ``--threads`` sets torch's threads for the runs (default 1). A clean script
should get no ``step-time-regression``; the bug script should. Every run's series are judged
twice on the same readings, at the steps where the monitor runs its series checks: by this
checkout's ``timing.step_time_regression`` and, with ``--against FILE``, by another checkout's
``step_time_regression`` (its ``timing.py``, or ``checks.py`` before that was split; loaded from
that file), so both rules meet the same load.

    git show HEAD:src/treeqa/health/timing.py > /tmp/timing_before.py
    python benchmarks/bench_step_time_load.py --runs 20 --busy 3 \
        --against /tmp/timing_before.py --out benchmarks/results/step-time-load-busy3

``--first-pass`` judges each run a third time (``first_pass``), by this checkout's rule on the
reference workload's first pass after each step, which the monitor runs to warm the caches and
does not time (``monitor.Canary``): the reading it took before, kept here beside its own.

``--replay REPORT.json ...`` judges recorded reports (``treeqa doctor --json``) by both rules
instead, at the checks the monitor ran (``--threads`` as the run had them).

Each row also keeps the run's quarters (``quarters``): what the step time, its time less the
wait, CPU time, the reference workload and the share of waiting did over the run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import io
import json
import math
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from treeqa.health import monitor, run_doctor, timing
from treeqa.health.monitor import SERIES_CHECKS

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "health" / "scripts"
CLEAN = ["clean_ctc.py", "clean_gru.py", "clean_maximize_mse.py"]
BUG = ["bug_step_time_regression.py"]
EVERY = 10
SUITE = ["tests/train", "tests/health/test_forks.py"]


FIRST: list[float] = []
"""The reference workload's first pass after each step of the current run (``--first-pass``)."""


def timing_first_pass(timed: Callable[[monitor.Canary], float]) -> Callable[..., float]:
    """``Canary.__call__`` that also times a pass of the workload before its own (``FIRST``)."""

    def call(canary: monitor.Canary) -> float:
        start = time.perf_counter()
        (canary.a * canary.b).sum(1)
        FIRST.append(time.perf_counter() - start)
        return timed(canary)

    return call


def with_first_pass(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` whose reference readings are the first passes of its run (``FIRST``)."""
    readings = iter(FIRST)
    canary = [
        v if v is None or math.isnan(v) else next(readings) for v in report["series"]["canary"]
    ]
    return {**report, "series": {**report["series"], "canary": canary}}


def spin(go: Any) -> None:
    go.wait()
    while True:
        pass


def doctored(
    script: Path, delay: float, busy: int, early: int, suite: bool = False
) -> tuple[float, dict[str, Any]]:
    """Wall seconds and report of one doctor run, ``busy`` spinners (or, with ``suite``, the
    test suite) starting after ``delay``."""
    go, now = mp.Event(), mp.Event()
    now.set()
    spinners = [mp.Process(target=spin, args=(go,), daemon=True) for _ in range(busy)]
    spinners += [mp.Process(target=spin, args=(now,), daemon=True) for _ in range(early)]
    for p in spinners:
        p.start()
    tests: list[subprocess.Popen[bytes]] = []

    def arrive() -> None:
        go.set()
        if suite:  # a session of its own: stopped with everything it started
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITE]
            out = subprocess.DEVNULL
            tests.append(subprocess.Popen(command, cwd=ROOT, stdout=out, start_new_session=True))

    FIRST.clear()
    timer = threading.Timer(delay, arrive)
    timer.start()
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            _, report = run_doctor(["python", str(script)], every=EVERY, stream=io.StringIO())
    finally:
        timer.cancel()
        timer.join()
        for p in spinners:
            p.terminate()
            p.join()
        for t in tests:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(t.pid, signal.SIGKILL)
            t.wait()
    return time.perf_counter() - started, report


def replayed(report: dict[str, Any], judge: Callable[..., Any]) -> list[int]:
    """The series-check steps at which ``judge`` (a ``step_time_regression``) made a finding,
    on the report's readings up to each (profiled steps taken out, as the monitor does)."""
    series = {
        k: [math.nan if v is None else float(v) for v in vs] for k, vs in report["series"].items()
    }
    profiled = set()
    for f in report["findings"]:
        if f["code"] == "hot-op" and "steps" in f["evidence"]:
            first, last = f["evidence"]["steps"]
            profiled |= set(range(first, last + 1))
    unprofiled = {
        k: [math.nan if s in profiled else v for s, v in zip(series["step"], vs, strict=True)]
        for k, vs in series.items()
    }
    # The steps' work as the monitor reads it (autograd nodes; elements given to the model
    # where recorded); (a rule from before ``one_thread`` was judged takes no such argument).
    work = timing.most_growth(
        *(series[k] for k in ("autograd_nodes", "input_elements") if k in series)
    )
    one = torch.get_num_threads() == 1
    one_thread = {"one_thread": one} if "one_thread" in inspect.signature(judge).parameters else {}
    n, at, due = len(series["step"]), [], EVERY
    for s in range(1, n + 1):
        if s < due and s < n:
            continue
        due = s + max(EVERY, s // SERIES_CHECKS)
        found = judge(
            unprofiled["step_time"][:s],
            unprofiled["cpu_time"][:s],
            series["canary"][:s],
            unprofiled["cpu_wait"][:s],
            work[:s],
            **one_thread,
        )
        if found is not None:
            at.append(s)
    return at


def quarters(report: dict[str, Any]) -> dict[str, list[float] | None]:
    """The run's readings as the rule sees them over the whole run: quarter medians of the
    step time, its time less the wait (``own``), the process's CPU time and the reference
    workload (ms; the reference's fastest tenth too), and each quarter's share of waiting."""
    series = {
        k: [math.nan if v is None else float(v) for v in vs] for k, vs in report["series"].items()
    }
    warmup = timing.warmup_of(len(series["step"]))
    own = timing.less_wait(series["step_time"], series["cpu_wait"])

    def ms(found: list[float] | None) -> list[float] | None:
        return None if found is None else [round(v * 1e3, 4) for v in found]

    shares = timing.quarter_shares(series["cpu_wait"], series["step_time"], warmup)
    return {
        "step_ms": ms(timing.quarter_medians(series["step_time"], warmup)),
        "own_ms": ms(timing.quarter_medians(own, warmup)),
        "cpu_ms": ms(timing.quarter_medians(series["cpu_time"], warmup)),
        "canary_ms": ms(timing.quarter_medians(series["canary"], warmup)),
        "canary_fastest_ms": ms(timing.quarter_lows(series["canary"], warmup)),
        "wait_share": None if shares is None else [round(v, 3) for v in shares],
    }


def load_rule(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("timing_against", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each script (default 20)")
    parser.add_argument("--busy", type=int, default=3, help="spinners arriving part-way")
    parser.add_argument("--early", type=int, default=0, help="spinners from the start")
    parser.add_argument("--suite", action="store_true", help="the test suite arrives instead")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--against", type=Path, help="another checkout's timing.py (or checks.py)")
    parser.add_argument("--first-pass", action="store_true", help="judge the first passes too")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scripts", nargs="+", help="these corpus scripts only")
    parser.add_argument("--out", type=Path, help="write OUT.json")
    parser.add_argument(
        "--replay", type=Path, nargs="+", help="judge these recorded reports (doctor --json) only"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    judges = {"this": timing.step_time_regression}
    if args.against:
        judges["against"] = load_rule(args.against).step_time_regression
    for path in args.replay or []:
        report = json.loads(path.read_text())
        found = {side: replayed(report, judge) for side, judge in judges.items()}
        print(json.dumps({"report": path.name, "threads": args.threads, **found}))
    if args.replay:
        return 0
    if args.first_pass:
        monitor.Canary.__call__ = timing_first_pass(monitor.Canary.__call__)  # type: ignore[method-assign]
    rng = random.Random(args.seed)
    rows: list[dict[str, Any]] = []
    names = args.scripts or CLEAN + BUG
    for name in names:
        script = SCRIPTS / name
        quiet = min(doctored(script, 0.0, 0, 0)[0] for _ in range(2))  # the first is cold
        for run in range(args.runs):
            delay = rng.uniform(0.1, 0.7) * quiet
            wall, report = doctored(script, delay, args.busy, args.early, args.suite)
            live = [f for f in report["findings"] if f["code"] == "step-time-regression"]
            row = {"script": name, "run": run + 1, "delay_s": round(delay, 3)}
            row |= {"wall_s": round(wall, 3), "live": bool(live)}
            row |= {side: replayed(report, judge) for side, judge in judges.items()}
            if args.first_pass:
                first = with_first_pass(report)
                row |= {"first_pass": replayed(first, timing.step_time_regression)}
                row |= {"first_pass_quarters": quarters(first)}
            row |= {"quarters": quarters(report)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    summary: dict[str, dict[str, str]] = {}
    for name in names:
        mine = [r for r in rows if r["script"] == name]
        summary[name] = {"live": f"{sum(r['live'] for r in mine)} of {len(mine)}"}
        for side in [*judges, "first_pass"] if args.first_pass else judges:
            summary[name][side] = f"{sum(bool(r[side]) for r in mine)} of {len(mine)}"
        print(name, "flagged:", summary[name])
    if args.out:
        meta = {"busy": args.busy, "early": args.early, "cpus": os.cpu_count()}
        meta |= {"suite": args.suite, "threads": args.threads, "first_pass": args.first_pass}
        meta |= {"torch": torch.__version__, "summary": summary}
        args.out.with_suffix(".json").write_text(json.dumps({**meta, "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

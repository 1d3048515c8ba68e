"""Shared fixtures: one doctor run per script."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from treeqa.health import run_doctor

SCRIPTS = Path(__file__).parent / "scripts"

FRESH_PROCESS = {
    "bug_memory_growth.py",
    "heap_sorted_lengths.py",
    "bug_loss_accumulated.py",
    "bug_anomaly_detection_on.py",
    "bug_spawn_not_wrapped.py",
    "bug_hogwild_probs_into_ce.py",
    "bug_pool_probs_into_ce.py",
    "bug_hogwild_after_warmup.py",
    "bug_hogwild_spawn_probs_into_ce.py",
    "clean_forkserver_pool.py",
    "bug_step_time_subnormal_weights.py",  # (torch's threads keep a flush-to-zero flag for life)
}
"""Scripts run as ``treeqa doctor`` runs them: in a new interpreter. In this long-lived test
process, heap that earlier tests freed is handed out again first, so a leak can fill it for
most of its run before RSS rises (seen once in ~15 runs); a fresh interpreter numbers its
first autograd node 0, which a scan once took for "no node" and so missed ``total += loss``;
and autograd's anomaly mode, once switched on, stays on for every later script. A script that
starts processes with torch.multiprocessing.spawn runs as it would from a shell."""


TORCHRUN = {
    "clean_ddp.py",
    "bug_ddp_inner_module.py",
    "bug_ddp_same_data.py",
    "bug_eval_on_one_shard.py",
    "bug_ddp_loss_times_processes.py",
    "clean_fsdp.py",
    "clean_fsdp1.py",
    "bug_fsdp_optimiser_before_shard.py",
    "bug_fsdp_zero_grad_per_micro_batch.py",
    "bug_fsdp_gradients_not_zeroed.py",
    "bug_fsdp1_gradients_not_zeroed.py",
}
"""Data-parallel and sharded (FSDP) scripts, run as ``treeqa doctor -- torchrun --nproc-per-node 2`` (gloo, CPU)."""

_REPORTS: dict[str, tuple[int, dict[str, Any], str]] = {}


def _run_cli(name: str, report: Path) -> tuple[int, dict[str, Any], str]:
    cmd = [sys.executable, "-m", "treeqa", "doctor", "--every", "10", "--json", str(report)]
    cmd += ["--", "python", str(SCRIPTS / name)]
    if name in TORCHRUN:
        cmd[-2:-1] = ["torchrun", "--standalone", "--nproc-per-node", "2"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    print(proc.stderr[-4000:])  # shown by pytest should a test of this run fail
    return proc.returncode, json.loads(report.read_text()), proc.stdout


@pytest.fixture
def doctor_report(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str], tuple[int, dict[str, Any], str]]:
    """``(exit code, report, script stdout)`` of ``treeqa doctor`` on a corpus script, run in
    process (no fresh interpreter and torch import per script) and cached for the rest of the
    test run (``again=True``: run anew)."""

    def run(name: str, again: bool = False) -> tuple[int, dict[str, Any], str]:
        if again:  # (a second run, not the one cached)
            _REPORTS.pop(name, None)
        if name in FRESH_PROCESS | TORCHRUN and name not in _REPORTS:
            _REPORTS[name] = _run_cli(name, tmp_path_factory.mktemp("doctor") / "report.json")
        if name not in _REPORTS:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code, report = run_doctor(
                    ["python", str(SCRIPTS / name)], every=10, stream=io.StringIO()
                )
            _REPORTS[name] = (code, report, out.getvalue())
        failures = _REPORTS[name][1].get("monitor_failures")
        assert not failures, f"{name}: the monitor's own code failed: {failures}"
        return _REPORTS[name]

    return run


@pytest.fixture
def doctor_script(tmp_path: Path) -> Callable[[str, str], list[dict[str, Any]]]:
    """A script's text run under the doctor in this process (``script.py`` in the test's
    ``tmp_path``): the findings it made of a code, the run without monitor failures."""

    def findings(text: str, code: str) -> list[dict[str, Any]]:
        script = tmp_path / "script.py"
        script.write_text(text)
        with contextlib.redirect_stdout(io.StringIO()):
            _, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
        assert not report.get("monitor_failures")
        return [f for f in report["findings"] if f["code"] == code]

    return findings

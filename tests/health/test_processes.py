"""``treeqa doctor -- torchrun``: the launcher's command split, and the side-by-side checks on
the processes' fingerprints. The corpus runs the scripts themselves under torchrun."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from treeqa.health import run_doctor
from treeqa.health.processes import (
    evaluation_on_one_shard,
    gradients_not_averaged,
    is_dtensor,
    launcher_split,
    merge,
    moments,
    same_data_on_every_process,
)
from treeqa.health.script import exit_on_sigterm


def test_the_launchers_options_stay_with_it_and_the_script_goes_to_each_worker() -> None:
    command = ["torchrun", "--standalone", "--nproc-per-node", "2", "train.py", "--lr", "1e-3"]
    assert launcher_split(command) == (
        "torchrun",
        ["--standalone", "--nproc-per-node", "2"],
        ["python", "train.py", "--lr", "1e-3"],
    )
    command = ["python3", "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "pkg.train"]
    assert launcher_split([*command, "-m", "x"]) == (
        "torchrun",
        ["--nproc_per_node=2"],
        ["python", "-m", "pkg.train", "-m", "x"],  # the script's own -m stays the script's
    )
    assert launcher_split(["python", "train.py", "--nproc-per-node", "2"]) is None
    assert launcher_split(["python", "-m", "pkg.train"]) is None
    with pytest.raises(ValueError, match="torch.distributed.launch is deprecated"):
        launcher_split(["python", "-m", "torch.distributed.launch", "train.py"])
    with pytest.raises(ValueError, match="--no-python runs no Python script"):
        launcher_split(["torchrun", "--no-python", "echo", "hi"])
    with pytest.raises(ValueError, match="torchrun's options could not be read"):
        launcher_split(["torchrun", "--nproc-per-node"])


def test_a_launcher_the_doctor_does_not_run_is_told_with_those_it_does(tmp_path: Path) -> None:
    supported = "torchrun, python -m torch.distributed.run, accelerate launch"
    with pytest.raises(FileNotFoundError, match=f"deepspeed: no such script, .*\\({supported}\\)"):
        run_doctor(["deepspeed", "--num_gpus", "2", "train.py"], stream=io.StringIO())
    with pytest.raises(FileNotFoundError, match=r"no such script \(treeqa doctor -- python"):
        run_doctor(["python", str(tmp_path / "train.py")], stream=io.StringIO())
    with pytest.raises(ValueError, match="accelerate env: .* runs `accelerate launch` alone"):
        launcher_split(["accelerate", "env"])


def test_accelerate_launch_without_accelerate_says_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "accelerate.commands.launch", None)  # import fails
    with pytest.raises(ValueError, match=r"accelerate is not installed here \(pip install"):
        launcher_split(["accelerate", "launch", "train.py"])


@pytest.mark.slow
def test_accelerate_launchs_options_stay_with_it_and_the_script_goes_to_each_process() -> None:
    pytest.importorskip("accelerate")
    command = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "train.py", "-m"]
    assert launcher_split(command) == (
        "accelerate",
        ["--multi_gpu", "--num_processes", "2"],
        ["python", "train.py", "-m"],
    )
    module = ["--cpu", "-m", "pkg.train", "--lr", "1"]
    for launcher in (["accelerate-launch"], ["python", "-m", "accelerate.commands.launch"]):
        assert launcher_split([*launcher, *module]) == (
            "accelerate",
            ["--cpu"],
            ["python", "-m", "pkg.train", "--lr", "1"],
        )
    with pytest.raises(ValueError, match="--tpu: its processes are started by torch_xla"):
        launcher_split(["accelerate", "launch", "--tpu", "train.py"])
    with pytest.raises(ValueError, match="--no_python runs no Python script"):
        launcher_split(["accelerate", "launch", "--no_python", "echo"])
    with pytest.raises(ValueError, match="accelerate launch's options could not be read"):
        launcher_split(["accelerate", "launch", "--num_processes"])


ACCELERATED = """
import sys

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(cpu=True)
torch.manual_seed(0)
x = torch.randn(512, 16)
loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model, opt, loader = accelerator.prepare(model, opt, loader)
for _epoch in range(6):
    for xb, yb in loader:
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        accelerator.backward(loss)
        opt.step()
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "steps"),
    [
        (["--cpu", "--num_processes", "1"], [96]),
        (["--multi_gpu", "--num_processes", "2"], [48, 48]),
    ],
    ids=["one-process", "torchrun"],
)
def test_every_process_accelerate_launch_starts_is_watched_and_merged(
    options: list[str], steps: list[int], tmp_path: Path
) -> None:
    """accelerate runs one process itself, or several through torchrun's machinery in its own
    process: either way each runs under a doctor of its own, and the script's exit code holds."""
    pytest.importorskip("accelerate")
    accelerate = Path(sys.executable).with_name("accelerate")
    script, report = tmp_path / "train.py", tmp_path / "report.json"
    script.write_text(ACCELERATED)
    command = [sys.executable, "-m", "treeqa", "doctor", "--every", "10", "--json", str(report)]
    command += ["--", str(accelerate), "launch", *options, str(script), "7"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", HF_HOME=str(tmp_path))  # (no accelerate config of the user's)
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 7, run.stderr[-3000:]
    result = json.loads(report.read_text())
    assert [(p["rank"], p["steps"]) for p in result["processes"]] == list(enumerate(steps))
    assert [f for f in result["findings"] if f["severity"] != "info"] == []


def prints(rank: int, weights: dict[str, list[float]], batches: dict[str, list[float]]) -> Any:
    return {"rank": rank, "world": 2, "weights": weights, "batches": batches, "sharded": False}


def test_weights_that_part_after_a_step_mean_the_gradients_were_not_averaged() -> None:
    same = {"1": [4.0, 0.5, 12.0], "2": [4.0, 0.25, 12.5]}
    assert gradients_not_averaged([prints(0, same, {}), prints(1, same, {})]) is None
    parted = {"1": [4.0, 0.5, 12.0], "2": [4.0, 0.25, 12.6]}
    found = gradients_not_averaged([prints(0, same, {}), prints(1, parted, {})])
    assert found is not None and found.severity == "error" and found.step == 2
    assert found.evidence["sum_of_squares"] == [12.5, 12.6]
    sharded = {**prints(1, parted, {}), "sharded": True}  # FSDP: a shard of its own on each
    assert gradients_not_averaged([prints(0, same, {}), sharded]) is None
    other_model = {"1": [5.0, 0.5, 12.0], "2": [5.0, 0.25, 12.6]}  # another parameter count
    assert gradients_not_averaged([prints(0, same, {}), prints(1, other_model, {})]) is None


def test_the_same_first_input_on_every_sampled_step_is_the_same_data() -> None:
    batch = {"2": [16.0, 8.0, 1.5], "3": [16.0, 8.0, -2.0], "10": [16.0, 8.0, 0.75]}
    found = same_data_on_every_process([prints(0, {}, batch), prints(1, {}, batch)])
    assert found is not None and found.evidence["steps"] == [2, 3, 10] and found.step == 2
    other = {**batch, "10": [16.0, 8.0, 0.5]}  # one step with a batch of its own: sharded data
    assert same_data_on_every_process([prints(0, {}, batch), prints(1, {}, other)]) is None
    once = {"2": batch["2"]}  # one step compared is too few to tell
    assert same_data_on_every_process([prints(0, {}, once), prints(1, {}, once)]) is None


def test_a_finding_of_several_processes_is_said_once_with_the_processes_that_made_it() -> None:
    def finding(code: str, where: str, family: str = "") -> dict[str, Any]:
        evidence = {"family": family} if family else {}
        return {"code": code, "severity": "warning", "message": f"{code}: m", "where": where,
                "evidence": evidence, "fix": "f", "step": 5}  # fmt: skip

    def process(rank: int, findings: list[dict[str, Any]]) -> dict[str, Any]:
        return {"findings": findings, "steps": 90 + rank, "series": {"step": [rank]},
                "process": prints(rank, {}, {})}  # fmt: skip

    result = merge(
        [
            process(1, [finding("hot-op", "aten::t", "other"), finding("input-bound", "")]),
            process(0, [finding("hot-op", "aten::mm", "other")]),
        ]
    )
    assert result["steps"] == 90 and result["series"] == {"step": [0]}  # process 0's
    by_code = {f["code"]: f for f in result["findings"]}
    assert by_code["hot-op"]["evidence"]["ranks"] == [0, 1]  # one family: one finding
    assert by_code["hot-op"]["message"] == "hot-op: m"
    assert by_code["input-bound"]["message"] == "input-bound: m (process 1)"
    assert [p["steps"] for p in result["processes"]] == [90, 91]
    assert result["monitor_failures"] == []


def test_the_monitors_own_failures_in_any_process_are_in_the_merged_report() -> None:
    def process(rank: int, failures: list[str]) -> dict[str, Any]:
        return {"findings": [], "steps": 90, "series": {"step": [rank]},
                "monitor_failures": failures, "process": prints(rank, {}, {})}  # fmt: skip

    result = merge([process(0, []), process(1, ["the monitor failed (E: x, at a.py:1); ..."])])
    assert result["monitor_failures"] == ["the monitor failed (E: x, at a.py:1); ... (process 1)"]


def test_moments_are_float64_over_chunks_of_a_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("treeqa.health.processes.CHUNK", 7)  # 100 elements: 15 chunks
    x = torch.randn(10, 10, dtype=torch.bfloat16)
    total, squares = moments(x.t())  # not contiguous
    assert total.dtype == torch.float64
    assert torch.allclose(total, x.double().sum()) and torch.allclose(
        squares, x.double().square().sum()
    )
    assert [v.item() for v in moments(torch.zeros(0))] == [0.0, 0.0]
    sampled = moments(torch.arange(10.0), most=4)  # every 3rd: 0, 3, 6, 9
    assert [v.item() for v in sampled] == [18.0, 126.0]


def test_an_evaluation_over_one_share_while_the_others_idle_scores_that_share() -> None:
    def process(rank: int, evaluations: int, on_shard: list[Any]) -> dict[str, Any]:
        evaluated = {"evaluations": evaluations, "on_shard": on_shard, "distributed": True}
        return {**prints(rank, {}, {}), **evaluated}

    alone = process(0, 6, [6, 2, "train.py:31", 32])
    found = evaluation_on_one_shard([alone, process(1, 0, [])])
    assert found is not None and found.where == "train.py:31" and found.step == 32
    assert found.evidence == {"share": "1/2", "forwards": 6, "not_evaluating": [1]}
    assert evaluation_on_one_shard([alone, process(1, 6, [6, 2, "train.py:31", 32])]) is None
    assert evaluation_on_one_shard([process(0, 6, []), process(1, 0, [])]) is None  # whole set
    # Processes that never joined a process group (a sweep run with spawn) are not compared.
    sweep = [{**alone, "distributed": False}, {**process(1, 0, []), "distributed": False}]
    assert evaluation_on_one_shard(sweep) is None


def test_a_worker_sent_sigterm_exits_through_python_and_so_still_reports() -> None:
    with pytest.raises(SystemExit) as stopped, exit_on_sigterm():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # (the handler runs at the next bytecode, well before this ends)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.slow
def test_treeqa_training_under_torchrun_is_clean_to_the_doctor(
    demo_dir: Path, tmp_path: Path
) -> None:
    """treeqa's own data-parallel training (each process every second batch, gradients
    averaged), watched process by process: its weights stay equal and its batches differ."""
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "treeqa", "doctor", "--json", str(report), "--"]
    command += ["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "treeqa", "train"]
    command += ["sentiment", "--model", "tree_lstm", "--embed_dim", "20", "--hidden_dim", "20"]
    command += ["--data", str(demo_dir), "--health", "off", "--epochs", "2"]
    command += ["--out", str(tmp_path / "run")]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(report.read_text())
    assert [p["rank"] for p in result["processes"]] == [0, 1]
    assert all(p["steps_compared"] >= 2 for p in result["processes"])
    assert [f for f in result["findings"] if f["severity"] != "info"] == []


SPAWNED_FOREVER = """
import os

import torch
import torch.multiprocessing as mp
from torch import nn


def work(rank):
    torch.manual_seed(rank)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while True:  # until a signal stops it
        loss = nn.functional.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 2, (16,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step == 20:
            os.write(1, b"training\\n")  # one write: the two processes' lines never interleave


if __name__ == "__main__":
    mp.spawn(work, nprocs=2)
"""


def test_sigterm_to_a_script_in_spawns_join_stops_its_processes_and_merges_their_reports(
    tmp_path: Path,
) -> None:
    """A scheduler's SIGTERM to the script while ``spawn`` waits for its processes: without the
    doctor the script is gone at once (and ``spawn`` has its processes signalled as their parent
    dies). The doctor merged no report, removed their folder, then waited on processes that
    never end."""
    script = tmp_path / "spawned.py"
    script.write_text(SPAWNED_FOREVER)
    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, "-m", "treeqa", "doctor", "--json", str(out), "--"]
    proc = subprocess.Popen(
        [*command, "python", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert [proc.stdout.readline() for _ in range(2)] == ["training\n"] * 2  # both step
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # (what a failure left running)
        proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "no process wrote a report" not in err
    result = json.loads(out.read_text())
    assert [p["rank"] for p in result["processes"]] == [0, 1]
    assert all(p["steps"] >= 1 for p in result["processes"]), result["processes"]


SPAWNED_ERROR = """
import torch
import torch.multiprocessing as mp
from torch import nn

def work(rank):
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    raise ValueError(f"bad rank {rank}")

if __name__ == "__main__":
    mp.spawn(work, nprocs=1)
"""


def test_a_spawned_processs_traceback_is_the_one_plain_python_prints(
    tmp_path: Path, side_by_side: Any
) -> None:
    """``spawn`` sends the parent the traceback its ``_wrap`` formats in the process: under the
    doctor it had two more frames (``Watched.__call__``, ``watch_process``) above the script's
    function. The doctor now runs around torch's ``_wrap``, not inside it."""
    (tmp_path / "spawned.py").write_text(SPAWNED_ERROR)
    doctor = [sys.executable, "-m", "treeqa", "doctor", "--json", "r.json", "--", "python"]
    plain, watched = side_by_side(
        [sys.executable, "spawned.py"], [*doctor, "spawned.py"], cwd=tmp_path
    )
    assert plain.returncode == watched.returncode == 1
    ours = [line for line in watched.stderr.splitlines() if not line.startswith("treeqa health")]
    assert ours == plain.stderr.splitlines() and "ValueError: bad rank 0" in plain.stderr
    assert "processes.py" not in watched.stderr and "launch.py" not in watched.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert [p["steps"] for p in result["processes"]] == [3]  # still watched, and reported


def test_moments_of_a_dtensor_are_this_processs_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fully_shard``'s parameters are DTensors: their moments are read off this process's
    part, as plain tensors (a DTensor's ``tolist()`` raises, and stopped the monitor)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    try:
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:  # torch 2.4: not public yet
        from torch.distributed._tensor import Shard, distribute_tensor

    # init_process_group sets an excepthook that prefixes "[rank0]: " and outlives the group
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        x = torch.arange(8.0)
        sharded = distribute_tensor(x, init_device_mesh("cpu", (1,)), [Shard(0)])
        assert is_dtensor(sharded) and not is_dtensor(x)
        total, squares = moments(sharded, most=4)
        assert type(total) is torch.Tensor and type(squares) is torch.Tensor
        assert torch.stack([total, squares]).tolist() == [12.0, 56.0]  # 0, 2, 4, 6
    finally:
        dist.destroy_process_group()

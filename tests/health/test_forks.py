"""The processes multiprocessing starts from a watched script, those that train and those that
do not: a Manager's server, a producer of data, daemons and children the script never joins."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from treeqa.health import forks, script

FLEET = """
import os, sys, time, torch, torch.multiprocessing as mp
from torch import nn
from torch.nn.functional import cross_entropy  # bound before a spawned child's doctor starts

def train(rank, model, done, linger):
    torch.set_num_threads(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(30):
        x = torch.randn(16, 8)
        loss = cross_entropy(torch.softmax(model(x), -1), (x[:, 0] > 0).long())  # the bug
        opt.zero_grad(); loss.backward(); opt.step()
    done.put(rank)
    if linger:  # a daemon, still running as the script ends
        time.sleep(300)

def produce(queue):  # fills the queue's pipe: ended by terminate(), it must not wait on it
    for _ in range(10_000):
        queue.put(os.urandom(1000))

if __name__ == "__main__":
    method, how = sys.argv[1], sys.argv[2]
    context = mp.get_context(method)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model.share_memory()
    manager = context.Manager()  # process 1: it trains nothing
    queue, done = context.Queue(), context.Queue()
    producer = context.Process(target=produce, args=(queue,))
    producer.start()
    queue.get()
    daemon = how == "daemon"
    trainers = [
        context.Process(target=train, args=(r, model, done, daemon), daemon=daemon)
        for r in range(2)
    ]
    for p in trainers:
        p.start()
    producer.terminate()
    producer.join()
    if how == "join":
        for p in trainers:
            p.join()
    elif daemon:
        print("trained:", sorted(done.get() for _ in trainers))
    print("producer ended by signal", -producer.exitcode)
"""


FLEETS = [("spawn", "daemon"), ("fork", "unjoined"), ("forkserver", "join")]


@pytest.fixture(scope="module")
def fleets(
    tmp_path_factory: pytest.TempPathFactory,
    side_by_side: Callable[..., list[subprocess.CompletedProcess[str]]],
) -> dict[tuple[str, str], tuple[subprocess.CompletedProcess[str], Path]]:
    """The fleet script under the doctor each way, the three runs side by side (each starts
    interpreters that import torch: run apart, the second core idles through them)."""
    folders = {fleet: tmp_path_factory.mktemp("-".join(fleet)) for fleet in FLEETS}
    commands = []
    for (method, how), folder in folders.items():
        (folder / "fleet.py").write_text(FLEET)
        cmd = [sys.executable, "-m", "treeqa", "doctor"]
        cmd += ["--json", str(folder / "r.json"), "--plot", str(folder / "r.png")]
        commands.append([*cmd, "--", "python", str(folder / "fleet.py"), method, how])
    runs = side_by_side(*commands, timeout=240)
    return {fleet: (run, folders[fleet]) for fleet, run in zip(FLEETS, runs, strict=True)}


@pytest.mark.parametrize(("method", "how"), FLEETS)
def test_children_that_train_report_and_the_others_are_left_as_python_runs_them(
    method: str,
    how: str,
    fleets: dict[tuple[str, str], tuple[subprocess.CompletedProcess[str], Path]],
) -> None:
    proc, tmp_path = fleets[method, how]
    assert proc.returncode == 0, proc.stderr
    assert "producer ended by signal 15" in proc.stdout  # at once, by the signal
    assert "Traceback" not in proc.stderr and "before it could report" not in proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    # The daemons and the children never joined report too, before the script's report.
    assert [p["steps"] for p in report["processes"]] == [30, 30], proc.stderr
    assert [f["code"] for f in report["findings"]] == ["probabilities-into-cross-entropy"]
    assert report["series"]["step"]  # a child's series: the script trained nothing
    assert (tmp_path / "r.png").stat().st_size > 0
    # The first child to step prints its findings as they come (process 1 is the Manager's).
    live = "treeqa health: ERROR [probabilities-into-cross-entropy] step 1:"
    assert proc.stderr.count(live) == 1, proc.stderr


def test_sigterm_in_a_child_after_its_report_ends_it_as_without_the_doctor() -> None:
    before = signal.signal(signal.SIGTERM, script.stop)  # the doctor's, as a child inherits it
    try:
        child = forks.Forks()
        child.ready(sys.stderr)
        assert signal.getsignal(signal.SIGTERM) == child._sigterm
        child.hold_sigterm()  # its run() is over: the report is being written
        child.release_sigterm()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        # A handler of the script's stays the script's.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child.ready(sys.stderr)
        child.hold_sigterm()
        child.release_sigterm()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


FORK_AFTER_TRAINING = """
import os, torch
from torch import nn
model = nn.Linear(2, 2)  # too small for a matmul to start the BLAS thread team
opt = torch.optim.SGD(model.parameters(), 0.1)
def train():
    for _ in range(30):
        loss = model(torch.randn(4, 2)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
train()
pid = os.fork()
if pid == 0:
    train()
    print("child done", flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent done")
"""


def test_a_script_that_forks_after_training_a_small_model_does_not_hang(tmp_path: Path) -> None:
    """The doctor's own work after a step starts no thread team (a child forked after one
    would hang in its first matmul); the test runs with the machine's threads."""
    (tmp_path / "train.py").write_text(FORK_AFTER_TRAINING)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    cmd = [sys.executable, "-m", "treeqa", "doctor", "--", "python", "train.py"]
    with open(tmp_path / "out.txt", "w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=env, start_new_session=True
        )
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child too, which holds no lock to free
            code = None
    said = (tmp_path / "out.txt").read_text()
    assert code == 0, said
    assert "child done" in said and "parent done" in said


CHILD_ERROR = """
import multiprocessing as mp
import torch

def work(n):
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad(); model(torch.randn(2, 4)).sum().backward(); opt.step()
    try:
        {}[n]
    except KeyError as e:
        raise ValueError(f"bad worker {n}") from e

if __name__ == "__main__":
    for method in ("fork", "spawn"):
        p = mp.get_context(method).Process(target=work, args=(1,))
        p.start(); p.join()
        print(method, "exit code", p.exitcode, flush=True)
"""


def test_a_child_s_traceback_is_the_one_plain_python_prints(
    tmp_path: Path, side_by_side: Callable[..., list[subprocess.CompletedProcess[str]]]
) -> None:
    # It had the doctor's frames (run_watched, ready_then_run) between _bootstrap and run.
    (tmp_path / "child.py").write_text(CHILD_ERROR)
    doctor = [sys.executable, "-m", "treeqa", "doctor", "--", "python"]
    plain, watched = side_by_side([sys.executable, "child.py"], [*doctor, "child.py"], cwd=tmp_path)
    assert watched.stdout == plain.stdout == "fork exit code 1\nspawn exit code 1\n"
    ours = [line for line in watched.stderr.splitlines() if not line.startswith("treeqa health")]
    assert ours == plain.stderr.splitlines() and "forks.py" not in watched.stderr
    assert plain.stderr.count("was the direct cause of the following exception") == 2


POOL_TASKS = """
import sys, torch, torch.multiprocessing as mp
from torch import nn

def job(seed):
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(20):
        x = torch.randn(16, 8)
        loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
        opt.zero_grad(); loss.backward(); opt.step()
    return seed

if __name__ == "__main__":
    with mp.get_context(sys.argv[1]).Pool(1) as pool:
        print(pool.map(job, range(3)))
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_pool_worker_counts_every_step_of_each_task(method: str, tmp_path: Path) -> None:
    """One worker runs three tasks, each with a model and optimiser of its own: the optimiser
    of a task before is freed, and the next one's first step is a step (it was not counted)."""
    (tmp_path / "pool.py").write_text(POOL_TASKS)
    cmd = [sys.executable, "-m", "treeqa", "doctor", "--json", "r.json", "--", "python", "pool.py"]
    proc = subprocess.run([*cmd, method], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert [(p["rank"], p["steps"]) for p in report["processes"]] == [(1, 60)], proc.stderr

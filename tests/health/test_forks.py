"""The processes multiprocessing starts from a watched script, those that train and those that
do not: a Manager's server, a producer of data, daemons and children the script never joins."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
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


@pytest.mark.parametrize(
    ("method", "how"), [("spawn", "daemon"), ("fork", "unjoined"), ("forkserver", "join")]
)
def test_children_that_train_report_and_the_others_are_left_as_python_runs_them(
    method: str, how: str, tmp_path: Path
) -> None:
    (tmp_path / "fleet.py").write_text(FLEET)
    cmd = [sys.executable, "-m", "treeqa", "doctor", "--json", "r.json", "--plot", "r.png"]
    cmd += ["--", "python", "fleet.py", method, how]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
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

"""Ctrl-C and SIGTERM: a training run saves where it is, stops, and resumes to the same curve."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from treeqa.recipes.sentiment import resolve_config, train
from treeqa.train import checkpoint as ckpt
from treeqa.train.loop import Callback, Interrupted, TrainState


def config(demo_dir: Path, epochs: int, *more: tuple[str, str]):
    return resolve_config(
        {},
        [("data", str(demo_dir)), ("epochs", str(epochs)), ("log_every", "1"), ("health", "off")]
        + list(more),
    )


EMA = ("train.ema_decay", "0.9")  # a callback with state of its own in the last checkpoint


def lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def losses(run: Path) -> list[float]:
    return [x["loss"] for x in lines(run) if "loss" in x]


@pytest.fixture(scope="module")
def full(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run of ``config(demo_dir, 3, EMA)``."""
    run = tmp_path_factory.mktemp("signals") / "full"
    train(config(demo_dir, 3, EMA), run)
    return run


class SignalAt(Callback):
    """Sends this process ``signum`` ``times`` times at the end of step ``at``."""

    def __init__(self, at: int, signum: int = signal.SIGTERM, times: int = 1):
        self.at, self.signum, self.times = at, signum, times

    def on_step_end(self, state: TrainState, output, batch) -> None:
        if state.step == self.at:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signum)


def test_sigterm_saves_the_step_it_stopped_at_and_resumes_to_the_same_curve(
    demo_dir: Path, full: Path, tmp_path: Path
) -> None:
    cut = tmp_path / "cut"
    with pytest.raises(Interrupted) as stop:  # 8 steps an epoch
        train(config(demo_dir, 3, EMA), cut, extra_callbacks=[SignalAt(11)])
    # Sent after StopOnSignal had seen step 11: the run stops after the step in progress, 12.
    assert (stop.value.signum, stop.value.step) == (signal.SIGTERM, 12)
    assert "stopped by SIGTERM after step 12 (epoch 2, batch 4)" in str(stop.value)
    assert isinstance(stop.value, KeyboardInterrupt)
    last = ckpt.load(cut / ckpt.LAST)
    assert (last.meta["state"]["step"], last.meta["state"]["epoch_step"]) == (12, 4)
    assert ckpt.load(cut / ckpt.BEST).meta["step"] == 8  # best stays epoch 1's: not scored
    assert [x["epoch"] for x in lines(cut) if "train_loss" in x] == [1]  # no line for a cut epoch
    # The handlers were the run's only.
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    train(config(demo_dir, 3, EMA), cut, resume_run=True)
    assert losses(cut) == losses(full)  # no batch skipped, none twice
    epochs = [[x["train_loss"] for x in lines(run) if "train_loss" in x] for run in (cut, full)]
    assert epochs[0] == epochs[1]
    a, b = (ckpt.load(run / ckpt.LAST).tensors for run in (full, cut))
    assert any(k.startswith("ema.") for k in a) and a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)  # weights, averages, optimiser, RNG


def test_a_signal_during_evaluation_stops_after_the_epoch_is_saved(
    demo_dir: Path, tmp_path: Path
) -> None:
    class SignalInEvaluation(Callback):
        def on_eval_start(self, state: TrainState, model) -> None:
            if state.epoch == 1:
                os.kill(os.getpid(), signal.SIGINT)

    run = tmp_path / "run"
    with pytest.raises(Interrupted) as stop:
        train(config(demo_dir, 3), run, extra_callbacks=[SignalInEvaluation()])
    assert (stop.value.signum, stop.value.step) == (signal.SIGINT, 8)
    assert "(the end of epoch 1)" in str(stop.value)
    assert [x["epoch"] for x in lines(run) if "train_loss" in x] == [1]  # scored and logged
    assert ckpt.load(run / ckpt.LAST).meta["state"]["epoch"] == 1


def test_a_second_signal_stops_at_once_without_saving(demo_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt) as stop:
        train(config(demo_dir, 3), run, extra_callbacks=[SignalAt(11, signal.SIGINT, times=2)])
    assert not isinstance(stop.value, Interrupted)
    assert ckpt.load(run / ckpt.LAST).meta["state"]["step"] == 8  # epoch 1's, as before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_cli_saves_on_a_signal_exits_128_plus_it_and_resumes(
    signum: int, demo_dir: Path, full: Path, tmp_path: Path
) -> None:
    from treeqa.cli.main import main

    args = ["train", "--data", str(demo_dir), "--epochs", "3", "--health", "off"]
    args += ["--train.log_every=1", "--train.ema_decay=0.9"]  # config(demo_dir, 3, EMA)
    cut = tmp_path / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "treeqa", *args, "--out", str(cut), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (cut / "metrics.jsonl").exists() and len(losses(cut)) >= 10:  # in epoch 2
            break
        time.sleep(0.01)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal")
    assert proc.returncode == 128 + signum, stderr
    name = signal.Signals(signum).name
    assert f"treeqa train: stopped by {name} after step" in stderr
    assert "Traceback" not in stderr
    saved = ckpt.load(cut / ckpt.LAST).meta["state"]
    step = saved["step"]
    assert step == len(losses(cut)) >= 10  # saved at the last step it logged
    # --json still gives the run's summary, alone on stdout (it gave nothing): where it stopped
    # (in the second epoch, or a later one on a fast machine)
    summary = json.loads(stdout)
    assert (summary["interrupted"], summary["steps"]) == (name, step)
    assert (summary["run_dir"], summary["epochs"]) == (str(cut), saved["epoch"])
    assert 1 <= summary["best_epoch"] <= summary["epochs"]
    assert main(["train", "--resume", str(cut)]) == 0
    assert losses(cut) == losses(full)


def test_the_command_stopped_by_ctrl_c_exits_quietly_on_another_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second Ctrl-C while Python shuts down (its exit handlers) would print a traceback
    # under Python's own handler: the command, once stopped, leaves it to the system.
    from treeqa.cli import data
    from treeqa.cli.main import main

    def stopped(args) -> int:
        raise Interrupted(signal.SIGINT, TrainState(step=3, epoch_step=3))

    monkeypatch.setattr(data, "run_stats", stopped)
    before = signal.getsignal(signal.SIGINT)
    try:
        assert main(["data", "stats", str(tmp_path)]) == 130  # a call from Python: as it was
        assert signal.getsignal(signal.SIGINT) is before
        monkeypatch.setattr(sys, "argv", ["treeqa", "data", "stats", str(tmp_path)])
        assert main() == 130
        assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before)


def test_evaluate_seeds_stopped_by_a_signal_says_where_with_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``train --json``: the seeds' summary so far, naming the signal and the seed's run
    directory, alone on stdout; the exit code stays 128 + the signal."""
    from treeqa.cli.main import main
    from treeqa.recipes import sentiment

    def stopped(config, out, resume_run=False):  # noqa: ANN001, ANN202
        raise Interrupted(signal.SIGTERM, TrainState(step=7, epoch_step=7))

    monkeypatch.setattr(sentiment, "train", stopped)
    out = tmp_path / "seeds"
    assert main(["evaluate", "--seeds", "2", "--epochs", "1", "--out", str(out), "--json"]) == 143
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert (summary["interrupted"], summary["steps"], summary["scored"]) == ("SIGTERM", 7, 0)
    assert summary["run_dir"] == str(out / f"seed-{summary['seed']}")
    assert "run this command again to go on from there" in captured.err

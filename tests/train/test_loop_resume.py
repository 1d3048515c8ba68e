"""fit() end to end: checkpoints, atomic writes, resume equal to an uninterrupted run."""

import json
from pathlib import Path

import pytest
import torch

from treeqa.recipes.sentiment import resolve_config, train
from treeqa.train import checkpoint as ckpt
from treeqa.train.loop import Callback, TrainState


def losses(run: Path) -> list[float]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [x["loss"] for x in lines if "loss" in x]


def config(demo_dir: Path, epochs: int):
    return resolve_config(
        {},
        [("data", str(demo_dir)), ("epochs", str(epochs)), ("log_every", "1"), ("health", "off")],
    )


class Killed(Exception):
    pass


class KillAfter(Callback):
    def __init__(self, epochs: int):
        self.epochs = epochs

    def on_epoch_end(self, state: TrainState, metrics: dict[str, float]) -> None:
        if state.epoch == self.epochs:
            raise Killed


def test_resume_gives_the_same_loss_curve(demo_dir: Path, tmp_path: Path) -> None:
    train(config(demo_dir, 4), tmp_path / "full")
    # The kill callback runs after the checkpointer, like a kill between epochs.
    with pytest.raises(Killed):
        train(config(demo_dir, 4), tmp_path / "cut", extra_callbacks=[KillAfter(2)])
    train(config(demo_dir, 4), tmp_path / "cut", resume_run=True)
    full, cut = losses(tmp_path / "full"), losses(tmp_path / "cut")
    assert len(full) == len(cut) > 0
    assert full == cut
    a = ckpt.load(tmp_path / "full" / ckpt.LAST).weights()
    b = ckpt.load(tmp_path / "cut" / ckpt.LAST).weights()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoint_is_self_describing_and_needs_no_pickle(demo_dir: Path, tmp_path: Path) -> None:
    train(config(demo_dir, 1), tmp_path / "run")
    best = ckpt.load(tmp_path / "run")
    assert best.meta["format_version"] == ckpt.FORMAT_VERSION
    assert best.meta["model"] == "bow" and best.meta["task"] == "sentiment"
    assert best.meta["vocab"][:2] == ["<pad>", "<unk>"]
    assert "root_acc" in best.meta["metrics"] and best.meta["train_config"]["epochs"] == 1
    assert set(best.weights()) == {"embed.weight", "classify.weight", "classify.bias"}
    assert not list((tmp_path / "run").glob("*.tmp"))


def test_corrupt_or_missing_checkpoints_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ckpt.CheckpointError, match="no such checkpoint"):
        ckpt.load(tmp_path / "nope.safetensors")
    with pytest.raises(ckpt.CheckpointError, match="run directory with no"):
        ckpt.load(tmp_path)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(ckpt.CheckpointError, match="not a readable"):
        ckpt.load(bad)


def test_atomic_save_leaves_the_old_file_when_writing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.safetensors"
    ckpt.atomic_save({"model.x": torch.ones(2)}, {"task": "t"}, path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        ckpt.atomic_save({"model.x": torch.zeros(2)}, {"task": "t"}, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]


def test_early_stopping_and_frozen_embeddings(demo_dir: Path, tmp_path: Path) -> None:
    cfg = resolve_config(
        {},
        [
            ("data", str(demo_dir)),
            ("epochs", "30"),
            ("patience", "1"),
            ("emblr", "0"),
            ("health", "off"),
        ],
    )
    result = train(cfg, tmp_path / "run")
    assert result["epochs"] < 30
    first = ckpt.load(tmp_path / "run" / ckpt.LAST)
    assert "optim.0.sum" in first.tensors  # Adagrad state saved for resume
    groups = first.meta["optimizer"]["param_groups"]
    assert [g["name"] for g in groups] == ["params"]  # no embedding group: frozen


def test_a_run_killed_mid_epoch_resumes_to_the_same_curve(demo_dir: Path, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from treeqa.cli.main import main

    args = ["train", "--data", str(demo_dir), "--epochs", "3", "--health", "off"]
    args += ["--train.log_every=1", "--train.checkpoint_every=3"]
    assert main([*args, "--out", str(tmp_path / "full")]) == 0
    cut = tmp_path / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "treeqa", *args, "--out", str(cut)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        log = cut / "metrics.jsonl"
        if log.exists() and len(losses(cut)) >= 11:  # into the second epoch, past a checkpoint
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if len(losses(cut)) >= 24:
        pytest.skip("the run finished before it could be killed")
    assert main(["train", "--resume", str(cut)]) == 0
    assert losses(cut) == losses(tmp_path / "full")


def test_loading_a_checkpoint_of_another_task_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "qa.safetensors"
    ckpt.atomic_save({"model.x": torch.ones(1)}, {"task": "qa"}, path)
    assert ckpt.load(path, task="qa").meta["task"] == "qa"
    with pytest.raises(ckpt.CheckpointError, match="a 'qa' checkpoint, not a 'sentiment' one"):
        ckpt.load(path, task="sentiment")

"""fit() end to end: checkpoints, atomic writes, resume equal to an uninterrupted run."""

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from treeqa.config import ConfigError
from treeqa.data.collated import Collated
from treeqa.models import build_sentiment_model
from treeqa.models.common import Output
from treeqa.recipes.sentiment import resolve_config, train
from treeqa.train import checkpoint as ckpt
from treeqa.train.callbacks import Checkpointer, resume
from treeqa.train.loop import (
    Callback,
    TrainConfig,
    TrainState,
    fit,
    resolve_device,
    seed_everything,
)


def losses(run: Path) -> list[float]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [x["loss"] for x in lines if "loss" in x]


def epoch_losses(run: Path) -> list[float]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [x["train_loss"] for x in lines if "train_loss" in x]


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


class Jittered(nn.Module):
    """A model whose loss draws from Python's and NumPy's generators (as a word dropout might)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> Output:
        noise = random.random() + float(np.random.rand())
        return Output(self.w * x, (self.w * x).sum() * noise)


class Losses(Callback):
    def __init__(self) -> None:
        self.seen: list[float] = []

    def on_step_end(self, state: TrainState, output: Output, batch) -> None:
        assert output.loss is not None
        self.seen.append(output.loss.item())


def three_ones(epoch: int) -> list[torch.Tensor]:
    return [torch.ones(3)] * 3


def jittered_fit(run: Path, *extra: Callback, resumed: bool = False) -> list[float]:
    seed_everything(0)  # as a recipe does at every start, a resumed one's too
    model = Jittered()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = resume(run, model, optimizer) if resumed else None
    losses = Losses()
    config = TrainConfig(epochs=2, health="off", device="cpu")
    callbacks = [Checkpointer(run, {}), losses, *extra]
    fit(model, optimizer, three_ones, config, callbacks=callbacks, state=state)
    return losses.seen


def test_a_resumed_run_goes_on_with_pythons_and_numpys_random_streams(tmp_path: Path) -> None:
    # Was: only torch's generator was saved, so a resumed run drew Python's and NumPy's numbers
    # from their freshly seeded start again.
    full = jittered_fit(tmp_path / "full")
    with pytest.raises(Killed):
        jittered_fit(tmp_path / "cut", KillAfter(1))
    assert jittered_fit(tmp_path / "cut", resumed=True) == full[3:]


def test_each_cuda_device_gets_back_its_own_generator_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Was: put back in the order of their names, so with twelve devices device 2 got the state
    # of device 10.
    states = {f"rng.cuda.{i}": torch.full((4,), i, dtype=torch.uint8) for i in range(12)}
    saved = ckpt.Checkpoint({}, {"rng.torch": torch.get_rng_state(), **states})
    given: list[torch.Tensor] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", given.extend)
    ckpt.restore_rng(saved)
    assert [int(s[0]) for s in given] == list(range(12))


def test_a_run_killed_before_its_first_last_checkpoint_starts_again(
    demo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train(config(demo_dir, 2), tmp_path / "full")
    cut, save = tmp_path / "cut", ckpt.atomic_save

    def killed_before_last(tensors, meta, path: Path) -> None:
        if path.name == ckpt.LAST:  # the first best is written, the first last half-written
            (path.parent / f"{ckpt.LAST}.123.abcd{ckpt.PARTIAL}").write_bytes(b"half")
            raise Killed
        save(tensors, meta, path)

    monkeypatch.setattr(ckpt, "atomic_save", killed_before_last)
    with pytest.raises(Killed):
        train(config(demo_dir, 2), cut)
    monkeypatch.undo()
    assert (cut / ckpt.BEST).exists() and not (cut / ckpt.LAST).exists()
    with pytest.raises(FileExistsError, match="--resume"):
        train(config(demo_dir, 2), cut)  # never trained over
    train(config(demo_dir, 2), cut, resume_run=True)
    assert losses(cut) == losses(tmp_path / "full")
    # the best checkpoint the killed run left is kept aside (were it a trained run's, whose
    # last checkpoint was removed, it would be lost otherwise)
    kept = ["best.1.safetensors", ckpt.BEST, ckpt.LAST]
    assert sorted(p.name for p in cut.glob("*.safetensors*")) == kept


def test_checkpoints_are_written_with_the_usual_file_mode(tmp_path: Path) -> None:
    import os

    umask = os.umask(0o022)
    try:
        ckpt.atomic_save({"model.x": torch.ones(1)}, {"task": "qa"}, tmp_path / "a.safetensors")
    finally:
        os.umask(umask)
    assert (tmp_path / "a.safetensors").stat().st_mode & 0o777 == 0o644


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


def test_a_checkpoint_changed_on_disk_is_refused_not_loaded_as_other_weights(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.safetensors"
    weights = {"model.w": torch.arange(6.0).reshape(2, 3), "model.h": torch.ones(2).bfloat16()}
    ckpt.atomic_save({**weights, "step": torch.tensor(7)}, {"task": "t"}, path)
    assert torch.equal(ckpt.load(path).weights()["w"], weights["model.w"])
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40  # one bit inside the last tensor's bytes: the header still reads
    path.write_bytes(bytes(data))
    with pytest.raises(
        ckpt.CheckpointError, match=f"{path}: its tensors do not match the checksum"
    ):
        ckpt.load(path)
    assert ckpt.read_meta(path)["task"] == "t"  # the metadata alone still reads
    # A checkpoint written before the checksum (or by safetensors itself) loads as before.
    from safetensors.torch import save_file

    save_file(weights, str(path), {"treeqa": json.dumps({"format_version": 1, "task": "t"})})
    assert set(ckpt.load(path).weights()) == {"w", "h"}


def test_a_checkpoint_replaced_while_it_is_read_is_read_again_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A training renames its new last checkpoint over the old one between the header read
    # and the tensors read of `treeqa evaluate`: that was the old header's checksum against
    # the new tensors, "the file changed on disk", for a file that was whole all along.
    path = tmp_path / "last.safetensors"
    ckpt.atomic_save({"model.w": torch.zeros(3)}, {"task": "t", "step": 1}, path)
    read = ckpt.load_file

    def training_writes_first(name: str) -> dict[str, torch.Tensor]:
        monkeypatch.setattr(ckpt, "load_file", read)
        ckpt.atomic_save({"model.w": torch.ones(3)}, {"task": "t", "step": 2}, path)
        return read(name)

    monkeypatch.setattr(ckpt, "load_file", training_writes_first)
    loaded = ckpt.load(path)
    assert loaded.meta["step"] == 2 and torch.equal(loaded.weights()["w"], torch.ones(3))

    def always_replaced(name: str) -> dict[str, torch.Tensor]:
        ckpt.atomic_save({"model.w": torch.ones(3)}, {"task": "t", "step": 3}, path)
        return read(name)

    monkeypatch.setattr(ckpt, "load_file", always_replaced)
    with pytest.raises(ckpt.CheckpointError, match=f"{path}: replaced by a newer one each of 3"):
        ckpt.load(path)


def test_atomic_save_leaves_the_old_file_when_writing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.safetensors"
    ckpt.atomic_save({"model.x": torch.ones(2)}, {"task": "t"}, path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt, "save", boom)
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
    # A line every 2 steps, a checkpoint every 3: the kill cuts a window (steps 9-10) in two.
    args += ["--train.log_every=2", "--train.checkpoint_every=3"]
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
        if log.exists() and len(losses(cut)) >= 5:  # step 10: past the checkpoint at step 9
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if len(losses(cut)) >= 12:
        pytest.skip("the run finished before it could be killed")
    assert main(["train", "--resume", str(cut)]) == 0
    assert losses(cut) == losses(tmp_path / "full")
    # The epoch's mean loss counts the steps before the kill too.
    assert epoch_losses(cut) == epoch_losses(tmp_path / "full")


def test_loading_a_checkpoint_of_another_task_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "qa.safetensors"
    ckpt.atomic_save({"model.x": torch.ones(1)}, {"task": "qa"}, path)
    assert ckpt.load(path, task="qa").meta["task"] == "qa"
    with pytest.raises(ckpt.CheckpointError, match="a 'qa' checkpoint, not a 'sentiment' one"):
        ckpt.load(path, task="sentiment")
    with pytest.raises(
        ckpt.CheckpointError, match=r"its commands: treeqa train qa, .* evaluate qa"
    ):
        ckpt.load(path, task="sentiment")


def test_train_config_values_out_of_range_name_the_field() -> None:
    cases = {
        "batch_size": (0, "train.batch_size: expected at least 1, got 0"),
        "epochs": (-1, "train.epochs: expected at least 1, got -1"),
        "log_every": (0, "train.log_every: expected at least 1, got 0"),
        "lr": (-1.0, "train.lr: expected at least 0, got -1.0"),
        "ema_decay": (1.5, "train.ema_decay: expected less than 1, got 1.5"),
        "amp": ("fp8", "train.amp: expected one of off | bf16 | fp16, got 'fp8'"),
        "health": ("maybe", "train.health: expected one of off | on | strict, got 'maybe'"),
        "adam_betas": ((0.9,), "train.adam_betas: expected two numbers in [0, 1), got [0.9]"),
    }
    for key, (value, message) in cases.items():
        with pytest.raises(ConfigError) as err:
            TrainConfig(**{key: value})
        assert str(err.value) == message


def test_a_class_count_that_does_not_fit_the_task_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"model.num_classes: 3 does not fit data.task 'fine'"):
        resolve_config({}, [("model", "tree_lstm"), ("model.num_classes", "3")])
    with pytest.raises(ConfigError, match="data.task 'binary', which has 2 classes"):
        resolve_config({"model": {"num_classes": 5}, "data": {"task": "binary"}}, [])
    fitting = resolve_config({}, [("task", "binary3"), ("model.num_classes", "3")])
    assert fitting.model.num_classes == 3
    # A run's saved config holds the count its task gave: another --task replaces it.
    saved = {"model": {"name": "tree_lstm", "num_classes": 5}, "data": {"task": "fine"}}
    assert resolve_config(saved, [("task", "binary")]).data.task == "binary"


@pytest.mark.parametrize(("task", "classes"), [("fine", 5), ("binary", 2), ("binary3", 3)])
def test_the_resolved_config_builds_a_model_with_the_tasks_classes(task: str, classes: int) -> None:
    # Was: 5 whatever the task until train() set it, so a model built from a binary config
    # in Python scored five classes against targets of two.
    config = resolve_config({}, [("model", "childsum"), ("task", task)])
    assert config.model.num_classes == classes
    model = build_sentiment_model(config.model.name, config.model, 10)
    assert model.classify.out_features == classes


def test_another_model_than_the_configs_says_whose_keys_it_holds() -> None:
    raw = {"model": {"name": "tree_gru", "cell": "gru"}}
    with pytest.raises(ConfigError, match="the config's \\[model\\] section is tree_gru's, and "
                       "--model childsum takes other keys"):  # fmt: skip
        resolve_config(raw, [("model", "childsum")])


def test_a_bad_device_name_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="^device 'tpu': expected auto, cpu, cuda or cuda:N$"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match=r"^device 'cuda:99': this machine has \d+ CUDA device"):
        resolve_device("cuda:99")
    assert resolve_device("cpu") == torch.device("cpu")


def test_a_metric_the_evaluation_does_not_report_stops_the_run(
    demo_dir: Path, tmp_path: Path
) -> None:
    # Before, every epoch scored -inf "no better" and no best checkpoint was ever written.
    bad = resolve_config({}, [("data", str(demo_dir)), ("health", "off"), ("metric", "acc")])
    with pytest.raises(ConfigError, match="train.metric: 'acc' is not a dev metric; choose one"):
        train(bad, tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before the first epoch
    binary = resolve_config({}, [("task", "binary3"), ("metric", "fine_root_acc")])
    with pytest.raises(ConfigError, match="choose one of binary_root_acc, binary_all_acc"):
        train(binary, tmp_path / "binary")


def test_checkpoint_metadata_that_is_broken_or_incomplete_names_the_file(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from treeqa.recipes.sentiment import load_model

    cases = {
        "{not json": "its treeqa metadata is not JSON",
        "[1, 2]": "its treeqa metadata is not a JSON object",
        '{"format_version": 1, "task": "sentiment"}': "its metadata has no model, model_config",
    }
    for header, message in cases.items():
        path = tmp_path / "c.safetensors"
        save_file({"model.x": torch.zeros(1)}, path, {"treeqa": header})
        with pytest.raises(ckpt.CheckpointError, match=f"^{path}: {message}"):
            load_model(path)


def test_weights_that_do_not_fit_their_config_name_the_file(demo_dir: Path, tmp_path: Path) -> None:
    from treeqa.recipes.sentiment import load_model

    train(config(demo_dir, 1), tmp_path / "run")
    best = ckpt.load(tmp_path / "run")
    path = tmp_path / "cut.safetensors"
    weights = {k: v for k, v in best.tensors.items() if k != "model.classify.bias"}
    ckpt.atomic_save(weights, best.meta, path)
    with pytest.raises(ckpt.CheckpointError) as err:
        load_model(path)
    assert str(err.value) == (
        f"{path}: its weights do not fit the model's config "
        '(Missing key(s) in state_dict: "classify.bias".)'
    )


def test_a_resume_whose_overrides_do_not_fit_leaves_the_run_config(
    demo_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    train(config(demo_dir, 1), run)
    saved = (run / "config.toml").read_text()
    wider = resolve_config(
        {}, [("data", str(demo_dir)), ("epochs", "2"), ("health", "off"), ("embed_dim", "7")]
    )
    with pytest.raises(
        ConfigError, match=r"model.embed_dim: 50 -> 7\. Only data.path, data.vectors, name, "
    ):
        train(wider, run, resume_run=True)
    assert (run / "config.toml").read_text() == saved


def test_a_resume_keeps_what_the_run_learns_with_and_may_change_how_long_it_goes_on(
    demo_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    train(config(demo_dir, 1), run)
    saved = (run / "config.toml").read_text()
    faster = resolve_config(
        {}, [("data", str(demo_dir)), ("epochs", "2"), ("health", "off"), ("lr", "0.9")]
    )
    # The restored optimiser would go on at the old rate while config.toml said 0.9.
    with pytest.raises(ConfigError, match=r"train.lr: 0.05 -> 0.9"):
        train(faster, run, resume_run=True)
    assert (run / "config.toml").read_text() == saved
    assert train(config(demo_dir, 2), run, resume_run=True)["epochs"] == 2


def test_a_resumed_run_that_stopped_early_stays_stopped(demo_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    patient = [("data", str(demo_dir)), ("epochs", "40"), ("health", "on"), ("patience", "1")]
    first = train(resolve_config({}, patient), run)
    assert first["epochs"] < 40  # stopped early
    report = (run / "health.json").read_text()
    again = train(resolve_config({}, patient), run, resume_run=True)
    assert again["epochs"] == first["epochs"]
    # It trained nothing: its health report stays (not set aside for an empty one)
    assert (run / "health.json").read_text() == report
    assert not (run / "health.1.json").exists()
    more = [*patient[:3], ("patience", "50")]
    assert train(resolve_config({}, more), run, resume_run=True)["epochs"] > first["epochs"]


class Poison(Callback):
    """Writes NaN into the weights after step ``at``, as a blown-up update would."""

    def __init__(self, at: int):
        self.at = at

    def on_fit_start(self, state: TrainState, model, optimizer) -> None:
        self.model = model

    def on_step_end(self, state: TrainState, output, batch) -> None:
        if state.step == self.at:
            with torch.no_grad():
                next(self.model.parameters()).fill_(float("nan"))


def test_a_strict_health_stop_keeps_the_checkpoints_from_before_it(
    demo_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    pairs = [("data", str(demo_dir)), ("epochs", "3"), ("log_every", "1")]
    pairs += [("health", "strict"), ("checkpoint_every", "2")]
    result = train(resolve_config({}, pairs), run, extra_callbacks=[Poison(11)])  # epoch 2 of 3
    assert result["aborted"] and result["epochs"] == 1
    last = ckpt.load(run / ckpt.LAST)
    assert last.meta["state"]["step"] == 10  # step 12's save held NaN: not written
    assert all(bool(v.isfinite().all()) for v in last.tensors.values() if v.is_floating_point())
    epochs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in epochs if "train_loss" in x] == [1]  # the cut epoch: no line
    assert json.loads((run / "health.json").read_text())["findings"][0]["code"] == "non-finite"


class StopAt(Callback):
    """Stops the run after step ``at``, as a time budget does."""

    def __init__(self, at: int):
        self.at = at

    def on_step_end(self, state: TrainState, output, batch) -> None:
        state.stop = state.stop or state.step == self.at


def test_a_run_stopped_part_way_through_an_epoch_resumes_from_the_next_batch(
    demo_dir: Path, tmp_path: Path
) -> None:
    train(config(demo_dir, 3), tmp_path / "full")
    cut = tmp_path / "cut"
    stopped = train(config(demo_dir, 3), cut, extra_callbacks=[StopAt(11)])  # epoch 2, batch 3
    assert (stopped["epochs"], stopped["steps"], stopped["aborted"]) == (1, 11, False)
    lines = [json.loads(x) for x in (cut / "metrics.jsonl").read_text().splitlines()]
    assert [(x["epoch"], x["step"]) for x in lines if "train_loss" in x] == [(1, 8), (2, 11)]
    assert [x.get("partial") for x in lines if "train_loss" in x] == [None, True]  # scored again
    train(config(demo_dir, 3), cut, resume_run=True)
    assert losses(cut) == losses(tmp_path / "full")  # no batch skipped, none twice
    a = ckpt.load(tmp_path / "full" / ckpt.LAST).weights()
    b = ckpt.load(cut / ckpt.LAST).weights()
    assert all(torch.equal(a[k], b[k]) for k in a)


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))

    def forward(self, batch: torch.Tensor) -> Output:
        logits = batch * self.weight  # [3]
        return Output(logits, logits.square().mean())


def test_a_run_resumed_part_way_through_an_epoch_does_not_collate_the_batches_it_skips() -> None:
    # The skipped batches were read, each collated (a QA batch padded, a forest planned), and
    # dropped: a SQuAD epoch resumed near its end collated most of it for nothing.
    collated: list[int] = []
    trained: list[int] = []

    def collate(group: np.ndarray) -> torch.Tensor:
        collated.append(int(group[0]))
        return torch.tensor(group, dtype=torch.float32)  # [3]

    class Seen(Callback):
        def on_batch_start(self, state: TrainState, batch: torch.Tensor) -> None:
            trained.append(int(batch[0]))

    groups = [np.full(3, i) for i in range(6)]
    model = Scale()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = fit(
        model,
        optimizer,
        lambda epoch: Collated(groups, collate),
        TrainConfig(epochs=1, health="off", device="cpu"),
        callbacks=[Seen()],
        state=TrainState(step=4, epoch_step=4),
    )
    assert trained == collated == [4, 5]
    assert (state.epoch, state.step, state.epoch_step) == (1, 6, 0)


def test_a_resumed_run_keeps_the_health_report_of_its_earlier_part(
    demo_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    watched = [("data", str(demo_dir)), ("log_every", "1"), ("health", "on")]
    train(resolve_config({}, [*watched, ("epochs", "1")]), run)
    first = json.loads((run / "health.json").read_text())
    train(resolve_config({}, [*watched, ("epochs", "2")]), run, resume_run=True)
    assert json.loads((run / "health.1.json").read_text()) == first
    assert json.loads((run / "health.json").read_text())["series"]["step"][0] == 9
    # Resumed once it has finished (as evaluate --seeds does), it trains and reports nothing.
    train(resolve_config({}, [*watched, ("epochs", "2")]), run, resume_run=True)
    assert sorted(p.name for p in run.glob("health*")) == ["health.1.json", "health.json"]


def epoch_lines(run: Path) -> list[int]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [x["epoch"] for x in lines if "train_loss" in x]


def test_a_kill_between_the_epochs_log_line_and_its_last_checkpoint_logs_the_epoch_once(
    demo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8 batches an epoch, a last checkpoint every 4 steps: step 8's is written before epoch 1
    # is scored and logged, and the kill comes before the epoch's own last checkpoint.
    def every4(epochs: int):
        cfg = config(demo_dir, epochs)
        return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, checkpoint_every=4))

    train(every4(2), tmp_path / "full")
    cut, save = tmp_path / "cut", ckpt.atomic_save

    def killed_at_epoch_end(tensors, meta, path: Path) -> None:
        if path.name == ckpt.LAST and "metrics" in meta and meta["step"] == 8:
            raise Killed
        save(tensors, meta, path)

    monkeypatch.setattr(ckpt, "atomic_save", killed_at_epoch_end)
    with pytest.raises(Killed):
        train(every4(2), cut)
    monkeypatch.undo()
    assert epoch_lines(cut) == [1]
    train(every4(2), cut, resume_run=True)
    assert epoch_lines(cut) == epoch_lines(tmp_path / "full") == [1, 2]
    assert losses(cut) == losses(tmp_path / "full")
    assert epoch_losses(cut) == epoch_losses(tmp_path / "full")


def test_a_checkpoint_write_that_fails_names_the_file_and_keeps_the_old_one(
    demo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    from treeqa.cli.main import main

    run = tmp_path / "run"
    base = ["train", "--data", str(demo_dir), "--health", "off"]
    assert main([*base, "--epochs", "1", "--out", str(run)]) == 0
    before = (run / ckpt.LAST).read_bytes()

    fsync = os.fsync

    def full(fd: int) -> None:  # a full disk as a checkpoint's bytes go out (config.toml fits)
        if os.fstat(fd).st_size > 10_000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    assert (run / ckpt.BEST).stat().st_size > 10_000 > (run / "config.toml").stat().st_size
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as caught:
        train(config(demo_dir, 2), run, resume_run=True)
    monkeypatch.undo()
    said = str(caught.value)
    assert said.startswith(f"{run / ckpt.LAST}: could not be written (No space left on device)")
    assert "already there is kept as it was" in said and f"--resume {run}" in said
    assert caught.value.errno == errno.ENOSPC
    assert (run / ckpt.LAST).read_bytes() == before
    assert not list(run.glob(f"*{ckpt.PARTIAL}"))
    assert main(["train", "--resume", str(run), "--epochs", "2"]) == 0  # room again: goes on

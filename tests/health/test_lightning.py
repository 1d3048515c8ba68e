"""The Lightning adapter: a LightningModule trained by a Lightning Trainer under the monitor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

pl = pytest.importorskip("lightning.pytorch")

from treeqa.health.lightning import HealthCallback  # noqa: E402


class Classifier(pl.LightningModule):
    """Five-class classifier; ``softmax_head`` adds the bug of probabilities into the loss,
    ``running_total`` that of adding up loss tensors."""

    def __init__(self, softmax_head: bool, running_total: bool = False):
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5)]
        self.net = nn.Sequential(*layers, *([nn.Softmax(dim=-1)] if softmax_head else []))
        self.running_total = running_total
        self.total: Any = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        if self.running_total:
            self.total += loss  # bug: keeps every step's graph
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def loader(seed: int) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(640, 20, generator=g)
    y = x[:, :5].argmax(1)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)


def train(
    softmax_head: bool, report: Path, running_total: bool = False, accumulate: int = 1
) -> dict[str, Any]:
    torch.manual_seed(0)
    callback = HealthCallback(json_path=report, every=10)
    trainer = pl.Trainer(
        max_epochs=2,
        accumulate_grad_batches=accumulate,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(Classifier(softmax_head, running_total), loader(0), loader(1))
    return json.loads(report.read_text())


def test_lightning_clean_run_has_no_warnings(tmp_path: Path) -> None:
    report = train(softmax_head=False, report=tmp_path / "clean.json")
    assert len(report["series"]["step_time"]) == 40  # 2 epochs x 20 batches, validation apart
    assert [f["code"] for f in report["findings"] if f["severity"] != "info"] == []


def test_lightning_steps_are_optimiser_steps_under_accumulation(tmp_path: Path) -> None:
    report = train(softmax_head=False, report=tmp_path / "acc.json", accumulate=4)
    assert len(report["series"]["step_time"]) == 10  # 2 epochs x 20 batches / 4, not 40
    assert [f["code"] for f in report["findings"] if f["severity"] != "info"] == []


def test_lightning_softmax_into_cross_entropy_is_named(tmp_path: Path) -> None:
    report = train(softmax_head=True, report=tmp_path / "bug.json")
    codes = {f["code"]: f for f in report["findings"]}
    assert "probabilities-into-cross-entropy" in codes
    assert codes["probabilities-into-cross-entropy"]["severity"] == "error"
    assert "test_lightning.py" in codes["probabilities-into-cross-entropy"]["where"]


def test_lightning_running_total_of_losses_is_named(tmp_path: Path) -> None:
    """Lightning hands on_train_batch_end a detached loss; the adapter takes the one backward
    runs on (on_before_backward), so the graph checks run."""
    report = train(softmax_head=False, report=tmp_path / "total.json", running_total=True)
    found = next(f for f in report["findings"] if f["code"] == "loss-accumulated-with-graph")
    assert "Classifier.total" in found["where"] and "test_lightning.py" in found["where"]


class FailsAtBatch2(Classifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 2:
            raise RuntimeError("a bad batch")
        return super().training_step(batch, batch_idx)


def test_a_failed_fit_leaves_no_wrapper_or_hook(tmp_path: Path) -> None:
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[HealthCallback(json_path=tmp_path / "r.json", every=10)],
    )
    with pytest.raises(RuntimeError, match="a bad batch"):
        trainer.fit(FailsAtBatch2(softmax_head=False), loader(0))
    assert nn.functional.cross_entropy.__name__ == "cross_entropy"
    assert not torch.nn.modules.module._global_forward_hooks


ONE_CYCLE = """
import sys
import lightning as L
import torch
from torch import nn

torch.manual_seed(0)


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 4))
        self.seen = []  # each micro-batch's loss

    def training_step(self, batch, i):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y, label_smoothing=0.1)
        self.seen.append(loss.item())
        return loss

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=200)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": sys.argv[1]}}


x = torch.randn(4000, 16)
y = (x[:, 0] > 0).long() * 2 + (x[:, 1] > 1).long()  # 4 classes: 42, 8, 42, 8%
if len(sys.argv) > 2:  # labels drawn apart from their inputs
    y = y[torch.randperm(len(y))]
data = torch.utils.data.TensorDataset(x, y)
train = torch.utils.data.DataLoader(data, batch_size=40, shuffle=True)
trainer = L.Trainer(max_steps=200, accumulate_grad_batches=2, gradient_clip_val=1.0,
                    logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accelerator="cpu")
model = Model()
trainer.fit(model, train)
pairs = zip(model.seen[::2], model.seen[1::2])  # an optimiser step's two micro-batches
print("losses", " ".join(f"{(a + b) / 2:.6f}" for a, b in pairs))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("interval", "shuffled"), [("epoch", False), ("epoch", True), ("step", False)]
)
def test_a_one_cycle_stepped_once_an_epoch_by_lightning_stalls_the_run(
    interval: str, shuffled: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning steps a scheduler once an epoch unless told "interval": "step": a OneCycleLR
    sized in optimiser steps never leaves its warm-up (the model then learns little more than
    the classes' frequencies, its loss near their level); a loss at chance beside it says that
    the learning rate stayed low."""
    import contextlib
    import io

    from treeqa.health import run_doctor

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(ONE_CYCLE)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        command = ["python", "train.py", interval, *(["shuffled"] * shuffled)]
        code, report = run_doctor(command, every=10, stream=io.StringIO())
    assert code == 0 and report["steps"] == 200
    # Each step's loss is its two micro-batches' mean (Lightning divides each by 2): the
    # first one's half was read, as Lightning hands every step a closure.
    printed = [float(v) for v in out.getvalue().split("losses ")[1].split()]
    assert max(abs(a - b) for a, b in zip(report["series"]["loss"], printed, strict=True)) < 1e-4
    found = {f["code"]: f for f in report["findings"] if f["severity"] != "info"}
    if interval == "step":
        assert found == {}
        return
    assert found["lr-schedule-stalled"]["evidence"]["scheduler_steps"] == 4
    if shuffled:
        chance = found["loss-at-chance"]
        assert chance["evidence"]["imbalanced"]
        assert chance["evidence"]["low_lr"] == ["lr-schedule-stalled"]
        assert "the learning rate stayed low all run" in chance["message"]

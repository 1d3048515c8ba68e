"""``scheduler-given-metric``: a scheduler other than ``ReduceLROnPlateau`` stepped with a
metric, which it takes as the epoch; and the values a scheduler takes rightly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from treeqa.health.metric_steps import a_metric

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "scheduler-given-metric"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1200, 8)
y = (x @ torch.randn(8, 3)).argmax(1)
model = nn.Linear(8, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
scheduler = SCHEDULER
for epoch in range(8):
    for i in range(0, 1000, 100):
        loss = F.cross_entropy(model(x[i : i + 100]), y[i : i + 100])
        opt.zero_grad()
        loss.backward()
        opt.step()
        BATCH
    with torch.no_grad():
        val_loss = F.cross_entropy(model(x[1000:]), y[1000:])
        val_acc = (model(x[1000:]).argmax(1) == y[1000:]).float().mean().item()
    EPOCH
"""
"""80 steps, 8 epochs of 10: ``BATCH`` runs after each step, ``EPOCH`` after each epoch."""
STEP = "torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.1)"


def _script(scheduler: str, batch: str = "pass", epoch: str = "pass") -> str:
    return SCRIPT.replace("SCHEDULER", scheduler).replace("BATCH", batch).replace("EPOCH", epoch)


@pytest.mark.parametrize(
    ("scheduler", "batch", "epoch", "given"),
    [
        (STEP, "pass", "scheduler.step(val_loss)", "a loss"),  # a 0-dim tensor
        (STEP, "pass", "scheduler.step(val_loss.item())", "a loss"),
        (  # its own step, which takes fractional epochs by design
            "torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2)",
            "pass",
            "scheduler.step(val_loss.item())",
            "a loss",
        ),
        (
            "torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=8)",
            "pass",
            "scheduler.step(epoch=val_acc)",
            "an accuracy",
        ),
        (
            "torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=80)",
            "scheduler.step(loss.item())",
            "pass",
            "a loss",
        ),
    ],
)
def test_a_metric_given_to_a_schedulers_step_is_named(
    doctor_script: Doctor, scheduler: str, batch: str, epoch: str, given: str
) -> None:
    found = doctor_script(_script(scheduler, batch, epoch), CODE)
    assert len(found) == 1, found
    assert given in found[0]["message"]
    line = 18 if batch != "pass" else 22
    assert found[0]["where"].endswith(f":{line}")


@pytest.mark.parametrize(
    ("scheduler", "batch", "epoch"),
    [
        (STEP, "pass", "scheduler.step()"),
        (STEP, "pass", "scheduler.step(epoch + 1)"),  # whole epochs: deprecated, right
        (
            "torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1)",
            "pass",
            "scheduler.step(val_loss)",
        ),
        (
            "torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2)",
            "scheduler.step(epoch + i / 1000)",
            "pass",
        ),
        (  # fractional epochs, rising by one batch's share each step
            "torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=8)",
            "scheduler.step(epoch + (i + 100) / 1000)",
            "pass",
        ),
    ],
)
def test_epochs_and_a_plateaus_metric_pass(
    doctor_script: Doctor, scheduler: str, batch: str, epoch: str
) -> None:
    assert not doctor_script(_script(scheduler, batch, epoch), CODE)


def test_the_rule_on_numbers() -> None:
    assert a_metric([0.41, 0.38])  # a loss falls
    assert a_metric([0.5, 0.62, 0.62])  # came twice
    assert a_metric([0.61, 0.74, 0.79, 0.81, 0.82])  # an accuracy levelling off
    assert a_metric([18.2, 19.5, 20.3, 20.7, 20.9])  # a PSNR, alike
    assert not a_metric([0.61, 0.74, 0.79, 0.81])  # (three rises: not yet)
    assert not a_metric([0.233, 0.465, 0.698, 0.931, 1.0])  # an epoch's short last batch
    assert not a_metric([0.1, 0.2, 0.3, 0.4])  # a fractional epoch
    # a fractional epoch of batches that shrink as their sequences grow (a token budget)
    assert not a_metric([0.104, 0.162, 0.207, 0.247, 0.281, 0.312, 0.341])
    assert not a_metric([2.5, 3.5, 4.5, 5.5])
    assert a_metric([667.0, 667.0, 640.0])  # a count of right answers that fell
    assert not a_metric([1.0, 2.0, 3.0])
    assert not a_metric([3.0, 4.0, 5.0, 0.0, 1.0, 2.0])  # a second phase counted anew

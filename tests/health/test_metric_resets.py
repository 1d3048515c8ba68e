"""``metric-not-reset``: a torchmetrics metric computed once an epoch and never reset; and the
metrics that are reset, made anew, read as a running value within a pass, or read once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("torchmetrics")

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "metric-not-reset"
SCRIPT = """
import torch
import torchmetrics
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(800, 10)
y = (x[:, 0] + 0.3 * x[:, 1] > 0).long()
train = DataLoader(TensorDataset(x[:640], y[:640]), batch_size=32, shuffle=True)
val = DataLoader(TensorDataset(x[640:], y[640:]), batch_size=40)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), 0.05)
accuracy = torchmetrics.Accuracy(task="multiclass", num_classes=2)
running = torchmetrics.Accuracy(task="multiclass", num_classes=2)
for epoch in range(4):
    NEW
    model.train()
    for i, (xb, yb) in enumerate(train):
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running(out.argmax(1), yb)
        if i % 8 == 0:
            running.compute()  # a running value within the pass
    running.reset()
    model.eval()
    with torch.no_grad():
        for xb, yb in val:
            UPDATE
    print(epoch, float(accuracy.compute()))
    RESET
"""


def _script(update: str = "accuracy.update(model(xb), yb)", reset: str = "", new: str = "") -> str:
    return (
        SCRIPT.replace("UPDATE", update)
        .replace("RESET", reset or "pass")
        .replace("NEW", new or "pass")
    )


@pytest.mark.parametrize(
    "update", ["accuracy.update(model(xb), yb)", "accuracy(model(xb).argmax(1), yb)"]
)
def test_a_metric_computed_each_epoch_without_reset_is_named(doctor: Doctor, update: str) -> None:
    script = _script(update)
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["severity"] == "warning"
    line = script.splitlines().index("    print(epoch, float(accuracy.compute()))") + 1
    assert found[0]["where"].endswith(f":{line}")
    assert found[0]["evidence"]["metric"] == "MulticlassAccuracy"
    assert found[0]["evidence"]["carried"] == 2 * found[0]["evidence"]["updates"] // 3


@pytest.mark.parametrize(
    ("reset", "new"),
    [
        ("accuracy.reset()", ""),
        ("", "accuracy = torchmetrics.Accuracy(task='multiclass', num_classes=2)"),
    ],
)
def test_a_metric_reset_or_made_anew_each_epoch_is_not_named(
    doctor: Doctor, reset: str, new: str
) -> None:
    assert not doctor(_script(reset=reset, new=new), CODE)


def test_a_metric_read_once_after_training_is_not_named(doctor: Doctor) -> None:
    script = (
        _script().replace("    print(epoch, float(accuracy.compute()))\n", "")
        + "print(float(accuracy.compute()))\n"
    )
    assert not doctor(script, CODE)


def test_a_best_so_far_and_a_score_over_new_data_each_epoch_are_not_named(doctor: Doctor) -> None:
    """A ``MaxMetric`` of the best accuracy so far keeps its value across epochs by design; a
    score pooled over new data each epoch (a stream's new days) counts no example twice."""
    best = _script(reset="accuracy.reset()").replace(
        "    print(epoch, float(accuracy.compute()))",
        "    best(accuracy.compute())\n    print(epoch, float(best.compute()))",
    )
    best = best.replace(
        "for epoch in range(4):", "best = torchmetrics.MaxMetric()\nfor epoch in range(4):"
    )
    assert not doctor(best, CODE)
    stream = _script().replace(
        "        for xb, yb in val:",
        "        fresh = torch.randn(160, 10)\n"
        "        day = TensorDataset(fresh, (fresh[:, 0] > 0).long())\n"
        "        for xb, yb in DataLoader(day, batch_size=40):",
    )
    assert not doctor(stream, CODE)


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script

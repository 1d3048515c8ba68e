"""``output-squashed-twice``: a sigmoid of a sigmoid into ``BCELoss``, a log-softmax of a
softmax into ``nll_loss``; and one squash each, or squashes with a layer between."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "output-squashed-twice"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(640, 10)
y = (x[:, 0] + x[:, 1] > 0).long()
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, HEAD), LAST)
opt = torch.optim.Adam(model.parameters(), 1e-2)
for epoch in range(2):
    for i in range(0, 640, 32):
        out = model(x[i : i + 32])
        loss = LOSS
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def _script(head: int, last: str, loss: str) -> str:
    return SCRIPT.replace("HEAD", str(head)).replace("LAST", last).replace("LOSS", loss)


@pytest.mark.parametrize(
    ("head", "last", "loss", "outer", "inner"),
    [
        (
            1,
            "nn.Sigmoid()",
            "F.binary_cross_entropy(torch.sigmoid(out).squeeze(1), y[i : i + 32].float())",
            "sigmoid",
            "sigmoid",
        ),
        (
            2,
            "nn.Softmax(dim=1)",
            "F.nll_loss(F.log_softmax(out, dim=1), y[i : i + 32])",
            "log_softmax",
            "softmax",
        ),
        (
            2,
            "nn.Softmax(dim=1)",
            "F.nll_loss(torch.log(F.softmax(out, 1).clamp(min=1e-7)), y[i : i + 32])",
            "log of a softmax",
            "softmax",
        ),
        (
            2,
            "nn.Sigmoid()",
            "nn.CrossEntropyLoss()(F.log_softmax(out / 2.0, dim=1), y[i : i + 32])",
            "log_softmax",
            "sigmoid",
        ),
    ],
)
def test_an_output_squashed_twice_is_named(
    doctor: Doctor, head: int, last: str, loss: str, outer: str, inner: str
) -> None:
    script = _script(head, last, loss)
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["severity"] == "error"
    assert (found[0]["evidence"]["outer"], found[0]["evidence"]["inner"]) == (outer, inner)
    line = script.splitlines().index(f"        loss = {loss}") + 1
    assert found[0]["where"].endswith(f":{line}")


@pytest.mark.parametrize(
    ("head", "last", "loss"),
    [
        (1, "nn.Sigmoid()", "F.binary_cross_entropy(out.squeeze(1), y[i : i + 32].float())"),
        (
            1,
            "nn.Identity()",
            "F.binary_cross_entropy(torch.sigmoid(out).squeeze(1), y[i : i + 32].float())",
        ),
        (2, "nn.Softmax(dim=1)", "F.nll_loss(torch.log(out + 1e-8), y[i : i + 32])"),
        (2, "nn.Identity()", "F.nll_loss(F.log_softmax(out, dim=1), y[i : i + 32])"),
        (2, "nn.Sigmoid(), nn.Linear(2, 2)", "F.nll_loss(F.log_softmax(out, 1), y[i : i + 32])"),
        (2, "nn.LogSoftmax(dim=1)", "F.nll_loss(F.log_softmax(out, dim=1), y[i : i + 32])"),
    ],
)
def test_one_squash_is_not_named(doctor: Doctor, head: int, last: str, loss: str) -> None:
    assert not doctor(_script(head, last, loss), CODE)


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script

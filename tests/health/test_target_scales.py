"""``targets-not-scaled``: a regression on raw targets far from where a fresh model's output
starts; and standardised targets, a model started at their scale, small raw targets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "targets-not-scaled"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1536, 8)
y = OFFSET + SCALE * torch.tanh(x[:, :3].sum(1, keepdim=True)) + 0.05 * torch.randn(1536, 1)
mean, std = y.mean(), y.std()
model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
SETUP
opt = torch.optim.Adam(model.parameters(), 1e-3)
for epoch in range(4):
    for i in range(0, 1536, 32):
        loss = LOSS(model(x[i : i + 32]), TARGET[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def script(
    offset: float, scale: float, target: str = "y", setup: str = "", loss: str = "F.mse_loss"
) -> str:
    return (
        SCRIPT.replace("OFFSET", str(offset))
        .replace("SCALE", str(scale))
        .replace("TARGET", target)
        .replace("SETUP", setup)
        .replace("LOSS", loss)
    )


@pytest.mark.parametrize(
    ("offset", "scale", "loss"),
    [
        (300.0, 8.0, "F.mse_loss"),  # kelvin
        (20000.0, 5000.0, "nn.L1Loss()"),  # a price in dollars
        (-1000.0, 50.0, "nn.HuberLoss(delta=10.0)"),  # an energy
        (8.0, 0.3, "F.mse_loss"),  # a pH: small, but 27 standard deviations from 0
    ],
)
def test_raw_targets_far_from_the_outputs_are_named(
    doctor: Doctor, offset: float, scale: float, loss: str
) -> None:
    text = script(offset, scale, loss=loss)
    found = doctor(text, CODE)
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert found[0]["evidence"]["target_rms"] >= 10 * found[0]["evidence"]["output_rms_at_start"]
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.strip().startswith("loss ="))
    assert found[0]["where"].endswith(f":{line}")


@pytest.mark.parametrize(
    ("offset", "scale", "target", "setup"),
    [
        (300.0, 8.0, "((y - mean) / std)", ""),  # standardised
        (300.0, 8.0, "y", "model[2].bias.data.fill_(float(mean))"),  # started at their mean
        (3.0, 1.0, "y", ""),  # a rating from 1 to 5, raw
        (8.0, 0.3, "((y - mean) / std)", ""),  # a pH, standardised
    ],
)
def test_standardised_targets_or_a_model_at_their_scale_are_not_named(
    doctor: Doctor, offset: float, scale: float, target: str, setup: str
) -> None:
    assert not doctor(script(offset, scale, target, setup), CODE)


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script

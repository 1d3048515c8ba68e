"""``features-not-scaled``: tabular features in raw units given to a first ``Linear`` layer; and
standardised features, a norm layer first, statistics kept as buffers, LBFGS."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "features-not-scaled"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
n = 1024
sqft = 1500 + 500 * torch.randn(n)
year = 1980 + 20 * torch.randn(n)
garage = (torch.rand(n) < 0.5).float()
x = torch.stack([sqft, year, garage], 1)
y = ((sqft - 1500) / 500 + (year - 1980) / 20 + garage).unsqueeze(1)
mean, std = x.mean(0), x.std(0)
FIRST
model = nn.Sequential(FIRST_LAYER nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 1))
opt = OPTIMISER
for step in range(40):
    i = (step * 32) % n
    xb = INPUT
    loss = F.mse_loss(model(xb), y[i : i + 32])
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def script(
    input: str = "x[i : i + 32]",
    first_layer: str = "",
    first: str = "",
    optimiser: str = "torch.optim.Adam(model.parameters(), 1e-3)",
) -> str:
    return (
        SCRIPT.replace("FIRST_LAYER", first_layer)
        .replace("FIRST", first)
        .replace("OPTIMISER", optimiser)
        .replace("INPUT", input)
    )


def test_raw_features_into_the_first_linear_layer_are_named(doctor: Doctor) -> None:
    found = doctor(script(), CODE)
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert found[0]["where"] == "0 (Linear)"
    evidence = found[0]["evidence"]
    assert evidence["columns"] == 3 and evidence["large_columns"] == 2
    assert evidence["largest_rms"][0] > 1900 and evidence["smallest_rms"] < 1


@pytest.mark.parametrize(
    "input",
    [
        "x[i : i + 32] / x.max(0).values",  # years of 0.97 +- 0.01: a band far from 0
        "torch.log1p(x[i : i + 32])",  # the log of a year: 7.59 +- 0.01
        "x[i : i + 32] / 100",  # sqft in hundreds (15 +- 5), years 19.8 +- 0.2
    ],
)
def test_features_in_a_narrow_band_far_from_0_are_named(doctor: Doctor, input: str) -> None:
    found = doctor(script(input), CODE)
    assert len(found) == 1 and found[0]["evidence"]["banded_columns"] >= 1
    assert "narrow band" in found[0]["message"]


def test_raw_features_into_a_recurrent_or_convolutional_layer_are_named(doctor: Doctor) -> None:
    rnn = (
        script()
        .replace(
            "model = nn.Sequential(",
            "class Last(nn.Module):\n"
            "    def forward(self, out):\n"
            "        return out[0][:, -1]\n"
            "\n"
            "\n"
            "model = nn.Sequential(nn.GRU(3, 32, batch_first=True), Last(), nn.Linear(32, 1))\n"
            "unused = nn.Sequential(",
        )
        .replace("xb = x[i : i + 32]", "xb = x[i : i + 32].unsqueeze(1).expand(32, 5, 3)")
    )
    found = doctor(rnn, CODE)
    assert len(found) == 1 and found[0]["where"] == "0 (GRU)"
    conv = (
        script()
        .replace(
            "model = nn.Sequential(",
            "model = nn.Sequential(nn.Conv1d(3, 8, 1), nn.Flatten(), nn.Linear(8, 1))\n"
            "unused = nn.Sequential(",
        )
        .replace("xb = x[i : i + 32]", "xb = x[i : i + 32].unsqueeze(2)")
    )
    found = doctor(conv, CODE)
    assert len(found) == 1 and found[0]["where"] == "0 (Conv1d)"


def test_a_frozen_layer_that_standardises_is_passed_by(doctor: Doctor) -> None:
    text = script(first_layer="scaler,").replace(
        "mean, std = x.mean(0), x.std(0)\n",
        "mean, std = x.mean(0), x.std(0)\n"
        "scaler = nn.Linear(3, 3)\n"
        "scaler.weight.data = torch.diag(1 / std)\n"
        "scaler.bias.data = -mean / std\n"
        "scaler.requires_grad_(False)\n",
    )
    assert not doctor(text, CODE)


@pytest.mark.parametrize(
    ("input", "first_layer", "first"),
    [
        ("(x[i : i + 32] - mean) / std", "", ""),  # standardised
        ("x[i : i + 32]", "nn.BatchNorm1d(3),", ""),  # a norm layer first
        ("x[i : i + 32]", "nn.LayerNorm(3),", ""),
        ("(x[i : i + 32] - x.min(0).values) / (x.max(0).values - x.min(0).values)", "", ""),
        ("(x[i : i + 32] - mean) / 100", "", ""),  # centred, in hundreds: ~5 at most
    ],
)
def test_scaled_features_or_a_norm_first_are_not_named(
    doctor: Doctor, input: str, first_layer: str, first: str
) -> None:
    assert not doctor(script(input, first_layer, first), CODE)


def test_statistics_applied_in_the_forward_are_not_named(doctor: Doctor) -> None:
    text = (
        script()
        .replace(
            "model = nn.Sequential(",
            "class Scaled(nn.Module):\n"
            "    def __init__(self, net):\n"
            "        super().__init__()\n"
            "        self.net = net\n"
            "        self.register_buffer('mean', mean)\n"
            "        self.register_buffer('std', std)\n"
            "\n"
            "    def forward(self, x):\n"
            "        return self.net((x - self.mean) / self.std)\n"
            "\n"
            "\n"
            "model = Scaled(nn.Sequential(",
        )
        .replace("nn.Linear(32, 1))", "nn.Linear(32, 1)))")
    )
    assert not doctor(text, CODE)


def test_a_linear_regression_solved_by_lbfgs_is_not_named(doctor: Doctor) -> None:
    text = script(optimiser="torch.optim.LBFGS(model.parameters(), max_iter=5)").replace(
        "    loss = F.mse_loss(model(xb), y[i : i + 32])\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n",
        "\n"
        "    def closure():\n"
        "        opt.zero_grad()\n"
        "        loss = F.mse_loss(model(xb), y[i : i + 32])\n"
        "        loss.backward()\n"
        "        return loss\n"
        "\n"
        "    opt.step(closure)\n",
    )
    assert not doctor(text, CODE)


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script

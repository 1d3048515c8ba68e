"""``dataset-changed-in-place``: examples transformed in place by their own reading (in a
Dataset's ``__getitem__``, or on batches sliced as views); and in-place work on copies,
augmentations written afresh from clean data, caches filled once, soft targets updated."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "dataset-changed-in-place"
DATASET = """
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
N = 640
raw = torch.rand(N, 20) * 255
y = (raw[:, 0] > raw[:, 1]).long()


class Images(Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y
        self.clean = x.clone()
        self.rows = list(x.clone())  # per-example tensors
        self.soft = torch.full((len(x), 2), 0.5)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        GET
        return x, self.y[i], i


data = Images(raw.clone(), y)
loader = DataLoader(data, batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), 1e-3)
for epoch in range(4):
    EPOCH
    for xb, yb, idx in loader:
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        data.soft[idx] = 0.6 * data.soft[idx] + 0.4 * out.detach().softmax(1)
"""
SLICED = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
N = 640
X = torch.rand(N, 20)
y = (X[:, 0] > X[:, 1]).long()
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), 1e-3)
for epoch in range(4):
    for i in range(0, N, 32):
        SLICE
        loss = F.cross_entropy(model(xb), y[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


@pytest.mark.parametrize(
    ("get", "sliced"),
    [
        ("x = self.x[i]\n        x /= 255.0", False),
        ("x = self.x[i]\n        x.add_(torch.randn_like(x) * 20)", False),
        ("x = self.x[i]\n        x.sub_(100.0).div_(80.0)", False),
        ("x = self.rows[i]\n        x /= 255.0", False),
        ("xb = X[i : i + 32]\n        xb.sub_(0.5).mul_(2.0)", True),
        ("xb = X[i : i + 32]\n        xb += 0.1 * torch.randn_like(xb)", True),
    ],
)
def test_data_transformed_in_place_by_its_reading_is_named(
    doctor: Doctor, get: str, sliced: bool
) -> None:
    script = SLICED.replace("SLICE", get) if sliced else _dataset(get)
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["severity"] == "error"
    evidence = found[0]["evidence"]
    assert evidence["sliced_by_hand"] is sliced
    held = "Images.rows" if "self.rows" in get else "Images.x"
    sliced_from = "the tensor [640, 20] the model's input is sliced from"
    assert evidence["array"] == (sliced_from if sliced else held)
    assert evidence["values_transformed_again"] >= 16


@pytest.mark.parametrize(
    ("get", "epoch"),
    [
        ("x = self.x[i].clone()\n        x /= 255.0", ""),
        ("x = self.x[i] / 255.0", ""),
        ("x = self.x[i]", "data.x.copy_(data.clean + torch.randn_like(data.clean))"),
        (
            "x = self.x[i]\n        if self.clean[i, 0] >= 0:\n"
            "            self.x[i] = self.clean[i] / 255.0\n            self.clean[i, 0] = -1.0",
            "",
        ),
        ("x = self.x[i]", "data.x.copy_(torch.rand(N, 20) * 255)"),
    ],
)
def test_copies_fresh_writes_and_first_fills_are_not_named(
    doctor: Doctor, get: str, epoch: str
) -> None:
    assert not doctor(_dataset(get, epoch), CODE)


def test_batches_taken_by_index_then_changed_in_place_are_not_named(doctor: Doctor) -> None:
    script = SLICED.replace(
        "SLICE", "xb = X[torch.arange(i, i + 32)]\n        xb.sub_(0.5).mul_(2.0)"
    )
    assert not doctor(script, CODE)


def _dataset(get: str, epoch: str = "") -> str:
    return DATASET.replace("GET", get).replace("EPOCH", epoch or "pass")


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script

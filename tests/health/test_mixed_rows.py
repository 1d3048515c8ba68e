"""``rows-mixed-across-batch``: a model whose output for one example, in eval mode, changes
with the rest of its batch; and models that score each example alone, or cannot be judged (a
model that samples in eval mode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from treeqa.health.mixed_rows import _rows, _rows_differing

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "rows-mixed-across-batch"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randint(1, 50, (640, 12))
y = (x[:, 0] > x[:, -1]).long()
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.body = BODY
        self.fc = nn.Linear(32, 2)

    def forward(self, ids):
        h = self.emb(ids)
        h = MIX
        return self.fc(h)


model = Net()
opt = torch.optim.Adam(model.parameters(), 1e-3)
for xb, yb in loader:
    loss = F.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
ENCODER = "nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=FIRST), 1)"


def _script(body: str, mix: str) -> str:
    return SCRIPT.replace("BODY", body).replace("MIX", mix)


def test_a_time_first_encoder_given_the_batch_first_is_named(doctor: Doctor) -> None:
    found = doctor(_script(ENCODER.replace("FIRST", "False"), "self.body(h).mean(1)"), CODE)
    assert len(found) == 1 and found[0]["severity"] == "error"
    assert found[0]["where"] == "body (TransformerEncoder)"
    assert "batch_first=False" in found[0]["message"]
    assert found[0]["evidence"]["rows_changed"] == 1.0


@pytest.mark.parametrize(
    "mix",
    [
        "(h - h.mean(0)).mean(1)",  # centred over the batch
        "F.normalize(h.mean(1), dim=0)",
        "h.mean(1) * torch.softmax(h.mean((1, 2)), 0)[:, None]",  # weights over the batch
    ],
)
def test_rows_mixed_in_the_models_own_forward_are_placed_between_its_layers(
    doctor: Doctor, mix: str
) -> None:
    found = doctor(_script("nn.Identity()", mix), CODE)
    assert len(found) == 1
    assert found[0]["where"] == "Net.forward, between `emb` and `fc`"


def test_a_norm_without_running_statistics_is_information(doctor: Doctor) -> None:
    """A design for some uses (transductive batch norm): said, not warned of."""
    body = "nn.BatchNorm1d(32, track_running_stats=False)"
    found = doctor(_script(body, "self.body(h.mean(1))"), CODE)
    assert len(found) == 1 and found[0]["severity"] == "info"
    assert found[0]["where"] == "body (BatchNorm1d)"


@pytest.mark.parametrize(
    ("body", "mix"),
    [
        (ENCODER.replace("FIRST", "True"), "self.body(h).mean(1)"),
        (ENCODER.replace("FIRST", "False"), "self.body(h.transpose(0, 1)).mean(0)"),
        ("nn.BatchNorm1d(32)", "self.body(h.mean(1))"),  # running statistics in eval mode
        ("nn.LayerNorm(32)", "self.body(h).mean(1)"),
        # dropout on in eval mode: each run differs, so the batch cannot tell
        ("nn.Identity()", "F.dropout(h.mean(1), 0.5, training=True)"),
        # the batch mixed in train mode only (in-batch mixing as augmentation)
        ("nn.Identity()", "(0.9 * h + 0.1 * h.flip(0) if self.training else h).mean(1)"),
    ],
)
def test_models_that_score_each_example_alone_are_not_named(
    doctor: Doctor, body: str, mix: str
) -> None:
    assert not doctor(_script(body, mix), CODE)


def test_a_rows_batch_dim_is_dim_0_or_the_one_dim_of_that_size() -> None:
    assert _rows(torch.randn(8, 5, 3), 8).dim == 0  # type: ignore[union-attr]
    assert _rows(torch.randn(5, 8, 3), 8).dim == 1  # type: ignore[union-attr]
    assert _rows(torch.randn(5, 3), 8) is None
    assert _rows(torch.randn(5, 8, 8), 8) is None  # two dims of that size: no telling


def test_rows_differ_beyond_a_tolerance_of_their_size() -> None:
    x = torch.randn(8, 6)
    last = slice(4, None)
    same, moved = _rows(x, 8), _rows(x + 1e-7, 8)
    assert _rows_differing(same, moved, last) == 0.0
    mixed = _rows(x - x.mean(0), 8)
    assert _rows_differing(same, mixed, last) == 1.0
    assert _rows_differing(same, _rows(x[4:], 4), last) == 0.0  # the last rows scored alone
    assert _rows_differing(same, _rows(x.t().contiguous(), 6), last) is None


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script

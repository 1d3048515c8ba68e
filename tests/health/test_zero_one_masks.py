"""``attention-mask-not-additive``: a floating 0/1 mask given where attention adds a floating
mask to its scores; and boolean masks, additive masks of 0 and -inf, and float biases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "attention-mask-not-additive"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
V, T, B, D = 40, 12, 16, 32


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.attn = nn.MultiheadAttention(D, 4, batch_first=True)
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, 2)

    def forward(self, ids):
        h = self.embed(ids)
        MASK
        return self.out(h.mean(1))


model = Net()
opt = torch.optim.Adam(model.parameters(), 1e-3)
for step in range(40):
    ids = torch.randint(1, V, (B, T))
    lengths = torch.randint(3, T, (B,))
    ids[torch.arange(T)[None] >= lengths[:, None]] = 0
    y = (ids[:, 0] > V // 2).long()
    loss = F.cross_entropy(model(ids), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
MHA = "h = h + self.attn(h, h, h, key_padding_mask={})[0]"
SDPA = (
    "q, k, v = self.qkv(h).view(B, T, 3, 4, D // 4).permute(2, 0, 3, 1, 4)\n"
    "        h = h + F.scaled_dot_product_attention(q, k, v, attn_mask={})"
    ".transpose(1, 2).reshape(B, T, D)"
)


@pytest.mark.parametrize(
    "line",
    [
        MHA.format("(ids == 0).float()"),
        SDPA.format("(ids != 0)[:, None, None, :].float()"),
        SDPA.format("torch.tril(torch.ones(T, T))"),
    ],
)
def test_a_floating_mask_of_zeros_and_ones_is_named(doctor: Doctor, line: str) -> None:
    script = SCRIPT.replace("MASK", line)
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["severity"] == "error"
    assert 0 < found[0]["evidence"]["ones"] < found[0]["evidence"]["entries"]
    assert found[0]["where"].endswith(
        f":{script.splitlines().index('        ' + line.splitlines()[-1].strip()) + 1}"
    )


@pytest.mark.parametrize(
    "line",
    [
        MHA.format("ids == 0"),
        SDPA.format("(ids != 0)[:, None, None, :]"),
        SDPA.format("(1.0 - (ids != 0)[:, None, None, :].float()) * -1e9"),
        SDPA.format("nn.Transformer.generate_square_subsequent_mask(T)"),
        SDPA.format("-0.1 * (torch.arange(T)[None] - torch.arange(T)[:, None]).abs().float()"),
    ],
)
def test_boolean_and_additive_masks_are_not_named(doctor: Doctor, line: str) -> None:
    assert not doctor(SCRIPT.replace("MASK", line), CODE)


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script

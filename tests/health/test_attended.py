"""``padding-not-masked``: attention over padded batches with no padding mask (an encoder
without ``src_key_padding_mask``, ``scaled_dot_product_attention`` without ``attn_mask``,
scores by hand that nothing masks); and attention that masks the padding, or has none to mask."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "padding-not-masked"
HEAD = """
import math
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
V, PAD, S = 20, 0, 24


def batch(n, left=False, same=False):
    lengths = torch.full((n,), S) if same else torch.randint(4, S, (n,))
    ids = torch.randint(2, V, (n, S))
    pos = torch.arange(S)[None]
    padding = pos < (S - lengths)[:, None] if left else pos >= lengths[:, None]
    ids = ids.masked_fill(padding, PAD)
    return ids, ((ids == 5).sum(1) > (ids == 6).sum(1)).long()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32, padding_idx=PAD)
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
        self.enc = nn.TransformerEncoder(layer, 1)
        self.qkv = nn.Linear(32, 96)
        self.out = nn.Linear(32, 2)

    def attend(self, h, mask=None, causal=False):
        q, k, v = self.qkv(h).view(h.shape[0], h.shape[1], 3, 4, 8).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return o.transpose(1, 2).reshape(h.shape)

    def by_hand(self, h, fill=None):
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / math.sqrt(32)
        if fill is not None:
            scores = scores.masked_fill(fill[:, None, :], float("-inf"))
        return F.softmax(scores, dim=-1) @ v

    def forward(self, ids):
        h = self.emb(ids)
        pad = ids == PAD
        FORWARD
        return self.out(h.mean(1))


model = Model()
opt = torch.optim.Adam(model.parameters(), 1e-3)
for step in range(40):
    ids, y = batch(16, LEFT, SAME)
    loss = F.cross_entropy(model(ids), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _line(text: str) -> int:
    """The line of ``HEAD`` that holds ``text``."""
    return HEAD[: HEAD.index(text)].count("\n") + 1


def _run(doctor: Doctor, forward: str, left: bool = False, same: bool = False) -> Any:
    text = HEAD.replace("FORWARD", forward).replace("LEFT", str(left)).replace("SAME", str(same))
    return doctor(text, CODE)


@pytest.mark.parametrize(
    ("forward", "left"),
    [
        ("h = self.enc(h)", False),
        ("h = self.enc(h)", True),
        ("h = self.attend(h)", False),
        ("h = self.by_hand(h)", False),
        ("h = self.attend(h, causal=True)", True),  # a causal mask over left padding
        ("h = self.enc(h, mask=nn.Transformer.generate_square_subsequent_mask(S))", True),
    ],
)
def test_attention_without_a_padding_mask_is_named(
    doctor_script: Doctor, forward: str, left: bool
) -> None:
    found = _run(doctor_script, forward, left)
    assert len(found) == 1, found
    assert found[0]["evidence"]["side"] == ("left" if left else "right")
    call = {"enc": "FORWARD", "attend": "o = F.scaled", "by_hand": "return F.softmax"}
    line = _line(next(v for k, v in call.items() if f"self.{k}(" in forward))
    assert found[0]["where"].endswith(f":{line}")  # the attention's call


@pytest.mark.parametrize(
    ("forward", "left", "same"),
    [
        ("h = self.enc(h, src_key_padding_mask=pad)", False, False),
        ("h = self.enc(h, src_key_padding_mask=pad)", True, False),
        ("h = self.attend(h, mask=~pad[:, None, None, :])", False, False),
        ("h = self.by_hand(h, fill=pad)", False, False),
        ("h = self.attend(h, causal=True)", False, False),  # right padding: never attended
        ("h = self.enc(h)", False, True),  # rows of one length: no padding
        ("h = self.by_hand(h)", False, True),
        ("h = nn.functional.relu(h)", False, False),  # no attention
        # each row cropped to its tokens and attended alone: no padded batch
        (
            "h = torch.stack([F.pad(self.by_hand(r[None, : int(n)])[0], (0, 0, 0, S - int(n)))"
            " for r, n in zip(h, (~pad).sum(1))])",
            False,
            False,
        ),
    ],
)
def test_attention_that_masks_the_padding_or_has_none_is_clean(
    doctor_script: Doctor, forward: str, left: bool, same: bool
) -> None:
    assert _run(doctor_script, forward, left, same) == []


def test_length_bucketed_batches_padded_by_one_are_named_by_their_padding_idx(
    doctor_script: Doctor,
) -> None:
    """Rows of two lengths a batch, the shorter padded by one: one padding length, told as
    padding by the Embedding's ``padding_idx`` (without it, one length is no padding)."""
    bucketed = HEAD.replace(
        "    lengths = torch.full((n,), S) if same else torch.randint(4, S, (n,))",
        "    lengths = S - torch.randint(0, 2, (n,))",
    )
    text = bucketed.replace("FORWARD", "h = self.enc(h)").replace("LEFT", "False")
    found = doctor_script(text.replace("SAME", "False"), CODE)
    assert len(found) == 1 and found[0]["evidence"]["padding"] == 1, found
    undeclared = text.replace(", padding_idx=PAD)", ")").replace("SAME", "False")
    assert doctor_script(undeclared, CODE) == []

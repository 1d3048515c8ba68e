"""``argmax-over-one-class`` and ``accuracy-broadcast``: a trained model's output scored
between its forwards, by an argmax over a dim of size 1 or by a comparison that broadcasts
``[N, 1]`` against ``[N]``; and the shapes that read like them and are right."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
HEAD = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(600, 8)
y = (x[:, 0] > 0).float()
classes = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, OUT))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(40):
    i = (step * 20) % 500
    out = model(x[i : i + 20])
    if OUT == 1:
        loss = F.binary_cross_entropy_with_logits(out.squeeze(1), y[i : i + 20])
    else:
        loss = F.cross_entropy(out, classes[i : i + 20])
    opt.zero_grad()
    loss.backward()
    opt.step()
    TRAINING
model.eval()
with torch.no_grad():
    out = model(x[500:])
"""

SCORED = HEAD.count("\n") + 1
"""The line of the scoring's first line."""


def _run(doctor: Doctor, outputs: int, scored: str, code: str, training: str = "pass") -> Any:
    text = HEAD.replace("OUT", str(outputs)).replace("TRAINING", training)
    return doctor(text + "\n".join("    " + line for line in scored.splitlines()) + "\n", code)


@pytest.mark.parametrize(
    "scored",
    [
        "pred = out.argmax(1)",
        "_, pred = torch.max(out, 1)",
        "pred = torch.sigmoid(out).max(dim=1).indices",
        "pred = out.topk(1).indices",
        "pred = torch.argmax(out.data, dim=-1)",
    ],
)
def test_a_single_logit_argmaxed_is_named_at_its_line(doctor_script: Doctor, scored: str) -> None:
    found = _run(doctor_script, 1, scored, "argmax-over-one-class")
    assert len(found) == 1, found
    assert found[0]["severity"] == "error"
    assert found[0]["evidence"]["shape"] == [100, 1]
    assert found[0]["where"].endswith(f":{SCORED}")  # the scoring line


def test_a_training_accuracy_by_argmax_is_named_on_a_sampled_step(doctor_script: Doctor) -> None:
    train = "acc = (out.argmax(1).float() == y[i : i + 20]).float().mean()"
    found = _run(doctor_script, 1, "pass", "argmax-over-one-class", training=train)
    assert len(found) == 1, found


@pytest.mark.parametrize(
    "scored",
    [
        "pred = (out.squeeze(1) > 0).float()",  # by its sign
        "pred = torch.sigmoid(out).round()",
        "pred = torch.max(out)",  # the largest value: no class picked
        "pred = torch.max(out, torch.zeros_like(out))",  # of two tensors
        "pred = out.argmax()",  # over everything
        "pred = out.unsqueeze(1).argmax(-1)",  # another shape than the output's
        "pick = torch.softmax(out, dim=1).argmax(1)",  # one value throughout: a mixture of one
    ],
)
def test_a_single_logit_predicted_otherwise_is_clean(doctor_script: Doctor, scored: str) -> None:
    assert _run(doctor_script, 1, scored, "argmax-over-one-class") == []


def test_a_one_channel_max_inside_a_forward_is_clean(doctor_script: Doctor) -> None:
    text = """
import torch
from torch import nn
from torch.nn import functional as F


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 1)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        g = self.proj(x)  # [N, 1]
        top, _ = torch.max(g, dim=1, keepdim=True)
        return self.head(x * torch.sigmoid(top))


torch.manual_seed(0)
model = Gate()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(200, 8), torch.randint(0, 2, (200,))
for step in range(40):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    acc = (model(x).argmax(1) == y).float().mean()
"""
    assert doctor_script(text, "argmax-over-one-class") == []


@pytest.mark.parametrize(
    ("outputs", "scored"),
    [
        (3, "pred = out.argmax(dim=1, keepdim=True)\nacc = pred.eq(classes[500:]).float().mean()"),
        (1, "pred = (torch.sigmoid(out) > 0.5).float()\nacc = (pred == y[500:]).float().mean()"),
        (1, "acc = torch.eq(y[500:], out.round()).sum()"),
    ],
)
def test_predictions_compared_broadcast_are_named(
    doctor_script: Doctor, outputs: int, scored: str
) -> None:
    found = _run(doctor_script, outputs, scored, "accuracy-broadcast")
    assert len(found) == 1, found
    assert found[0]["evidence"]["shapes"] in ([[100, 1], [100]], [[100], [100, 1]])
    assert found[0]["where"].endswith(f":{SCORED + scored.count(chr(10))}")


@pytest.mark.parametrize(
    "scored",
    [
        "pred = out.argmax(dim=1, keepdim=True)\nacc = pred.eq(classes[500:].view_as(pred)).sum()",
        "mask = classes[500:].view(-1, 1) == classes[500:]",  # a contrastive mask: one tensor
        "onehot = classes[500:][:, None] == torch.arange(3)",
        "match = out.argmax(1, keepdim=True) == classes[:80]",  # a gallery of another size
        "pairs = classes[500:, None] == classes[None, 500:]",  # [N, 1] against [1, N]
        "match = classes[500:][:, None] == torch.randint(0, 3, (100,))",  # a vector's column
    ],
)
def test_comparisons_of_one_shape_or_on_purpose_are_clean(
    doctor_script: Doctor, scored: str
) -> None:
    assert _run(doctor_script, 3, scored, "accuracy-broadcast") == []

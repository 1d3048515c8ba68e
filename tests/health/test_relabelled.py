"""``evaluation-labels-permuted``: an evaluation whose targets are indexed otherwise than the
training ones (a vocabulary built again for the split, labels counted from 1), read off its
accuracy's comparisons or its loss; and evaluations that are merely poor, collapsed, or
confuse two classes both ways."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from treeqa.health.relabelled import _pairing

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "evaluation-labels-permuted"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
centres = torch.randn(4, 8) * 2


def split(n):
    k = torch.randint(0, 4, (n,))
    return centres[k] + torch.randn(n, 8), k


x_train, y_train = split(800)
x_val, k_val = split(200)
y_val = VAL_TARGETS
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    model.train()
    for i in range(0, 800, 32):
        loss = F.cross_entropy(model(x_train[i : i + 32]), y_train[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        SCORE
"""
ACCURACY = "accuracy = (model(x_val).argmax(1) == y_val).float().mean()"


def _run(doctor: Doctor, targets: str, score: str = ACCURACY) -> list[Any]:
    return doctor(SCRIPT.replace("VAL_TARGETS", targets).replace("SCORE", score), CODE)


@pytest.mark.parametrize(
    ("targets", "score"),
    [
        ("torch.tensor([2, 0, 3, 1])[k_val]", ACCURACY),  # a vocabulary of the split's own
        ("3 - k_val", "_, pred = torch.max(model(x_val), 1)\n        right = pred.eq(y_val).sum()"),
        (  # a validation loss alone
            "(k_val + 1) % 4",
            "val_loss = F.cross_entropy(model(x_val), y_val)",
        ),
        (  # predictions joined over batches, compared once
            "torch.tensor([1, 0, 2, 3])[k_val]",
            """pred = torch.cat([model(x_val[i : i + 50]).argmax(1) for i in range(0, 200, 50)])
        right = (pred == y_val).sum()""",
        ),
        (  # a training accuracy beside it, each its own
            "torch.tensor([3, 2, 1, 0])[k_val]",
            """train_accuracy = (model(x_train).argmax(1) == y_train).float().mean()
        """
            + ACCURACY,
        ),
    ],
)
def test_an_evaluation_indexed_otherwise_than_training_is_named(
    doctor_script: Doctor, targets: str, score: str
) -> None:
    found = _run(doctor_script, targets, score)
    assert len(found) == 1, found
    assert found[0]["evidence"]["mapped"] > 0.9
    assert found[0]["evidence"]["accuracy"] < 0.5
    assert "script.py" in found[0]["where"]


def test_a_model_trained_on_soft_targets_is_read_by_their_argmax(doctor_script: Doctor) -> None:
    """Mixup's or label smoothing's soft targets: the training accuracy is the argmax's."""
    script = SCRIPT.replace("VAL_TARGETS", "3 - k_val").replace("SCORE", ACCURACY)
    soft = "F.one_hot(y_train[i : i + 32], 4).float() * 0.9 + 0.025"
    found = doctor_script(script.replace("y_train[i : i + 32])\n", soft + ")\n", 1), CODE)
    assert len(found) == 1, found


@pytest.mark.parametrize(
    ("targets", "score"),
    [
        ("k_val", ACCURACY),
        ("k_val", "val_loss = F.cross_entropy(model(x_val), y_val)"),
        ("torch.randint(0, 4, (200,))", ACCURACY),  # labels unrelated: merely poor
        ("torch.zeros(200, dtype=torch.long)", ACCURACY),  # one class: no pairing to read
        (  # two classes confused both ways, the diagonal still leading
            "torch.where((k_val < 2) & (torch.rand(200) < 0.3), 1 - k_val, k_val)",
            ACCURACY,
        ),
        (  # predictions decoded off by one for the training set and the validation set alike
            "k_val",
            """decode = lambda out: (out.argmax(1) + 1) % 4
        train_right = (decode(model(x_train)) == y_train).sum()
        val_right = (decode(model(x_val)) == y_val).sum()""",
        ),
    ],
)
def test_evaluations_indexed_as_training_are_not_named(
    doctor_script: Doctor, targets: str, score: str
) -> None:
    assert _run(doctor_script, targets, score) == []


def test_a_pairing_is_one_to_one_over_the_classes_seen_and_beats_the_diagonal() -> None:
    swapped = [[0, 30, 0], [28, 2, 0], [0, 0, 40]]
    assert _pairing(swapped) == ({0: 1, 1: 0}, 98 / 100, 42 / 100)
    assert _pairing([[40, 0, 0], [0, 30, 0], [0, 0, 30]]) is None  # the identity
    assert _pairing([[20, 20, 0], [20, 20, 0], [0, 0, 20]]) is None  # two rows on one column
    assert _pairing([[0, 3, 0], [2, 0, 0], [0, 0, 5]]) is None  # too few rows
    assert _pairing([[0, 25, 25], [25, 0, 25], [25, 25, 0]]) is None  # no column leads
    ten = [[100 if j == i else 0 for j in range(10)] for i in range(10)]
    ten[0], ten[1] = ten[1], ten[0]  # 2 of 10 classes swapped: a fifth of the examples
    assert _pairing(ten) == ({0: 1, 1: 0}, 1.0, 0.8)
    collapsed = [[30, 30, 0, 0], [0, 0, 0, 0], [0, 0, 30, 30], [0, 0, 0, 0]]  # rows predicted
    assert _pairing(collapsed) is None  # columns 1 and 3 paired with no row
    # labels from 1 where training's are from 0: the last class's targets out of range, its
    # stray predictions (13, of other classes' examples) paired with no one
    stray = [[0, 60, 0, 0], [0, 0, 60, 0], [0, 0, 0, 60], [0, 7, 6, 0]]
    assert _pairing(stray) == ({0: 1, 1: 2, 2: 3}, 180 / 193, 0.0)

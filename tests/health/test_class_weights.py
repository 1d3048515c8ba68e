"""``class-weights-by-frequency``: a cross-entropy's class weights, or a binary one's
``pos_weight``, that rise with the classes' frequency (counts where their inverse was meant);
and weights that balance, are uniform, or favour a class for its cost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from treeqa.health.class_weights import _inverted_pos_weight, _proportional_weights

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "class-weights-by-frequency"
LOOP = """for step in range(100):
    i = step % 50 * 64
    loss = criterion(model(x[i : i + 64]), y[i : i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()"""
"""The training loop of both scripts below: 100 steps of 64 rows, two passes."""
HEAD = (
    """
import torch
from torch import nn

torch.manual_seed(0)
y = torch.multinomial(torch.tensor([0.7, 0.2, 0.1]), 3200, replacement=True)
x = torch.randn(3200, 6) + torch.randn(3, 6)[y]
counts = torch.bincount(y, minlength=3).float()
criterion = nn.CrossEntropyLoss(weight=WEIGHT)
model = nn.Linear(6, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
"""
    + LOOP
)


@pytest.mark.parametrize("weight", ["counts / counts.sum()", "counts", "counts / counts.mean()"])
def test_weights_that_rise_with_the_frequency_are_named(doctor_script: Doctor, weight: str) -> None:
    found = doctor_script(HEAD.replace("WEIGHT", weight), CODE)
    assert len(found) == 1, found
    assert 0.8 <= found[0]["evidence"]["slope"] <= 1.25
    assert found[0]["where"].endswith(":14")  # the loss's line


@pytest.mark.parametrize(
    "weight",
    [
        "counts.sum() / counts",
        "1 / counts.sqrt()",
        "torch.ones(3)",
        "torch.tensor([2.0, 1.0, 1.0])",  # a costly common class, on purpose: mildly
        "torch.tensor([5.0, 2.0, 1.0])",  # costs that follow the counts, not in proportion
        "counts.sqrt()",
        "torch.tensor([0.0, 1.0, 1.0])",  # the first class left out
    ],
)
def test_weights_that_balance_or_do_not_follow_the_counts_pass(
    doctor_script: Doctor, weight: str
) -> None:
    assert not doctor_script(HEAD.replace("WEIGHT", weight), CODE)


BINARY = (
    """
import torch
from torch import nn

torch.manual_seed(0)
y = (torch.rand(3200, COLUMNS) < torch.tensor(RATES)).float()
x = torch.randn(3200, 6) + y @ torch.randn(COLUMNS, 6)
positives = y.sum(0)
criterion = nn.BCEWithLogitsLoss(pos_weight=WEIGHT)
model = nn.Linear(6, COLUMNS)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
"""
    + LOOP
)


@pytest.mark.parametrize(
    ("weight", "named"),
    [
        ("positives / (3200 - positives)", True),
        ("(positives / (3200 - positives))[None]", True),  # [1, L]
        ("(3200 - positives) / positives", False),
        ("torch.ones(COLUMNS)", False),
    ],
)
@pytest.mark.parametrize(("columns", "rates"), [(1, "[0.1]"), (4, "[0.05, 0.1, 0.15, 0.5]")])
def test_pos_weight_of_positives_over_negatives_is_named(
    doctor_script: Doctor, weight: str, named: bool, columns: int, rates: str
) -> None:
    script = BINARY.replace("WEIGHT", weight).replace("RATES", rates)
    found = doctor_script(script.replace("COLUMNS", str(columns)), CODE)
    assert len(found) == named, found


def test_the_rules_on_numbers() -> None:
    assert _proportional_weights([700, 200, 100], [0.7, 0.2, 0.1]) is not None
    assert _proportional_weights([700, 200, 100], [1 / 7, 1 / 2, 1.0]) is None
    assert _proportional_weights([340, 330, 330], [0.34, 0.33, 0.33]) is None  # balanced
    assert _proportional_weights([700, 400, 0], [0.7, 0.4, 0.1]) is None  # two classes, 1.75x apart
    assert _proportional_weights([720, 210, 70], [5.0, 2.0, 1.0]) is None  # a cost's: slope 0.71
    assert _proportional_weights([700, 200, 100], [0.7, 0.2, float("nan")]) is None
    assert _inverted_pos_weight([100.0], 1000, [100 / 900]) is not None
    assert _inverted_pos_weight([100.0], 1000, [9.0]) is None
    assert _inverted_pos_weight([900.0], 1000, [9.0]) is not None  # rare negatives
    assert _inverted_pos_weight([450.0], 1000, [450 / 550]) is None  # balanced


def test_weights_that_a_schedule_moves_away_from_the_counts_pass(doctor_script: Doctor) -> None:
    """Head classes first on purpose: the counts for the first half, their inverse after."""
    script = HEAD.replace("WEIGHT", "counts / counts.sum()").replace(
        "    i = step % 50 * 64\n",
        "    i = step % 50 * 64\n    if step == 50:\n        criterion.weight = counts.sum() / counts\n",
    )
    assert not doctor_script(script, CODE)

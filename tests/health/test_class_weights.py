"""``class-weights-by-frequency``: a cross-entropy's class weights, or a binary one's
``pos_weight``, that rise with the classes' frequency (counts where their inverse was meant);
and weights that balance, are uniform, or favour a class for its cost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import ConcatDataset, Subset, TensorDataset

from treeqa.health import label_counts
from treeqa.health.class_weights import (
    _inverted_pos_weight,
    _proportional_weights,
    balanced_twice,
    balanced_twice_binary,
)

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


TWICE = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

torch.manual_seed(0)
y = torch.multinomial(torch.tensor([0.7, 0.2, 0.1]), 3200, replacement=True)
x = torch.randn(3200, 6) + torch.randn(3, 6)[y]
counts = torch.bincount(y, minlength=3).float()
data = TensorDataset(x, y)
loader = DataLoader(data, batch_size=64, SAMPLER)
criterion = nn.CrossEntropyLoss(weight=WEIGHT)
model = nn.Linear(6, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for xb, yb in loader:
        loss = criterion(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
"""Three classes at 70/20/10% in a ``TensorDataset``, drawn by ``SAMPLER``, weighted by
``WEIGHT``."""
BALANCING = "sampler=WeightedRandomSampler((1 / counts)[y], 3200)"


@pytest.mark.parametrize(
    ("sampler", "weight", "named"),
    [
        (BALANCING, "counts.sum() / counts", True),
        (BALANCING, "1 / counts", True),
        ("shuffle=True", "counts.sum() / counts", False),  # natural batches: weighted once
        (BALANCING, "1 / counts.sqrt()", False),  # not inverse (a slope of -0.5)
        (BALANCING, "torch.ones(3)", False),
    ],
)
def test_weights_inverse_to_the_data_over_balanced_batches_are_named(
    doctor_script: Doctor, sampler: str, weight: str, named: bool
) -> None:
    script = TWICE.replace("SAMPLER", sampler).replace("WEIGHT", weight)
    found = doctor_script(script, "class-balanced-twice")
    assert len(found) == named, found
    if named:
        assert -1.25 <= found[0]["evidence"]["weights_slope"] <= -0.8
        assert found[0]["where"].endswith(":17")  # the loss's line


def test_oversampled_indices_are_read_as_the_data_once(doctor_script: Doctor) -> None:
    """A ``Subset`` repeating the rare classes' examples: the data's labels are read at its
    indices, each once, so the batches it gives are balanced against them."""
    script = TWICE.replace("SAMPLER", "shuffle=True").replace("WEIGHT", "counts.sum() / counts")
    script = script.replace(
        "data = TensorDataset(x, y)\n",
        "repeats = (counts.max() / counts).round().long()[y]\n"
        "data = torch.utils.data.Subset(TensorDataset(x, y), "
        "torch.arange(3200).repeat_interleave(repeats).tolist())\n",
    )
    assert len(doctor_script(script, "class-balanced-twice")) == 1


@pytest.mark.parametrize(
    ("sampler", "named"),
    [
        ("sampler=WeightedRandomSampler(torch.where(y == 1, 9.0, 1.0), 3200)", True),
        ("shuffle=True", False),
    ],
)
def test_a_pos_weight_over_batches_balanced_already_is_named(
    doctor_script: Doctor, sampler: str, named: bool
) -> None:
    script = (
        TWICE.replace("SAMPLER", sampler)
        .replace(
            "torch.multinomial(torch.tensor([0.7, 0.2, 0.1]), 3200, replacement=True)",
            "(torch.rand(3200) < 0.1).long()",
        )
        .replace("torch.randn(3, 6)[y]", "torch.randn(2, 6)[y]")
        .replace("data = TensorDataset(x, y)", "data = TensorDataset(x, y.float())")
        .replace(
            "nn.CrossEntropyLoss(weight=WEIGHT)",
            "nn.BCEWithLogitsLoss(pos_weight=counts[0] / counts[1])",
        )
        .replace(
            "counts = torch.bincount(y, minlength=3)", "counts = torch.bincount(y, minlength=2)"
        )
        .replace("nn.Linear(6, 3)", "nn.Sequential(nn.Linear(6, 1), nn.Flatten(0))")
    )
    found = doctor_script(script, "class-balanced-twice")
    assert len(found) == named, found


def test_a_loader_over_a_plain_list_of_pairs_is_read(doctor_script: Doctor) -> None:
    """A list takes no weak reference: its labels are read through the loader's."""
    script = TWICE.replace("SAMPLER", BALANCING).replace("WEIGHT", "counts.sum() / counts")
    script = script.replace("data = TensorDataset(x, y)", "data = list(zip(x, y.tolist()))")
    assert len(doctor_script(script, "class-balanced-twice")) == 1


def test_the_data_s_labels_are_read_each_example_once() -> None:
    y = torch.tensor([0, 0, 0, 1])
    data = TensorDataset(torch.randn(4, 2), y)
    assert label_counts.labels(data).tolist() == [0, 0, 0, 1]
    assert label_counts.labels(Subset(data, [3, 3, 3, 0])).tolist() == [0, 1]
    assert label_counts.labels(ConcatDataset([data, data, Subset(data, [3])])).tolist() == [
        0,
        0,
        0,
        1,
    ]

    class Held(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.targets = [2, 1, 1]

        def __len__(self) -> int:
            return 3

        @property
        def labels(self) -> list[int]:  # (a property is not run)
            raise AssertionError

    assert label_counts.labels(Held()).tolist() == [2, 1, 1]
    assert label_counts.labels(TensorDataset(torch.randn(4, 2), torch.randn(4))) is None
    assert label_counts.labels(TensorDataset(torch.randn(4, 2))) is None


def test_the_twice_rules_on_numbers() -> None:
    assert balanced_twice([330, 340, 330], [700, 200, 100], [1 / 0.7, 1 / 0.2, 10.0]) is not None
    assert balanced_twice([700, 200, 100], [700, 200, 100], [1 / 0.7, 1 / 0.2, 10.0]) is None
    assert balanced_twice([330, 340, 330], [700, 200, 100], [1.0, 2.0, 3.0]) is None  # costs
    assert (
        balanced_twice([330, 340, 330], [340, 330, 330], [1.0, 3.0, 3.0]) is None
    )  # data balanced
    # negatives kept at a tenth and weighted 10: drawn less balanced than the data, not more
    assert balanced_twice_binary([500.0], 1000, [50.0], 1000, [1 / 9]) is None
    assert balanced_twice_binary([500.0], 1000, [100.0], 1000, [9.0]) is not None
    assert balanced_twice_binary([100.0], 1000, [100.0], 1000, [9.0]) is None  # natural


def test_labels_held_as_examples_columns_or_behind_a_wrapper_are_read() -> None:
    pairs = [(torch.randn(2), label) for label in (0, 1, 1)]
    assert label_counts.labels(pairs).tolist() == [0, 1, 1]

    class Folder(torch.utils.data.Dataset):  # torchvision's folders keep (path, class) pairs
        def __init__(self) -> None:
            self.samples = [("a.png", 2), ("b.png", 0)]

        def __len__(self) -> int:
            return 2

    class Columns(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.columns = {"features": torch.randn(3, 2), "label": torch.tensor([1, 0, 0])}

        def __len__(self) -> int:
            return 3

    class Jitter(torch.utils.data.Dataset):
        def __init__(self, base: torch.utils.data.Dataset) -> None:
            self.base, self.sigma = base, 0.1

        def __len__(self) -> int:
            return 3

    assert label_counts.labels(Folder()).tolist() == [2, 0]
    assert label_counts.labels(Columns()).tolist() == [1, 0, 0]
    wrapped = TensorDataset(torch.randn(3, 2), torch.tensor([0, 0, 1]))
    assert label_counts.labels(Jitter(wrapped)).tolist() == [0, 0, 1]
    assert label_counts.labels([(torch.randn(2), 0.5)]) is None  # not whole numbers

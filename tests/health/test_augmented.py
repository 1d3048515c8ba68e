"""``evaluation-inputs-random``: evaluation passes over one loader that draw the same examples
with other inputs (a random transform on the evaluation data); and evaluations whose inputs are
fixed, or whose examples change (a fresh sample, a rebuilt set), or that are training passes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "evaluation-inputs-random"
SCRIPT = """
from collections import UserDict

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, SubsetRandomSampler, TensorDataset, random_split

torch.manual_seed(0)
x = torch.randn(600, 16)
y = (x[:, :4].sum(1) > 0).long()


class Noisy(Dataset):
    def __init__(self, rows, noise):
        self.rows, self.noise = rows, noise

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        j = self.rows[i]
        return x[j] + self.noise * torch.randn(16), y[j]


class Labelled(Dataset):
    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        x, y = self.data[i]
        return x, {"label": y}


class Masked(Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        ids = torch.arange(20) + i
        return ids.masked_fill(torch.rand(20) < 0.15, 0), torch.ones(20, dtype=torch.long)


TRAIN = Noisy(range(500), 0.3)
VALIDATION_LOADER
train_loader = DataLoader(TRAIN, batch_size=50, shuffle=True)
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    model.train()
    for xb, yb in train_loader:
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    SCORING
"""
SCORE = """with torch.no_grad():
        correct = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader)"""


def _run(doctor: Doctor, val: str, evaluate: str = SCORE, train: str = "") -> list[Any]:
    script = SCRIPT.replace("VALIDATION_LOADER", val).replace("SCORING", evaluate)
    return doctor(script.replace("TRAIN = ", train or "TRAIN = "), CODE)


@pytest.mark.parametrize(
    ("val", "evaluate"),
    [
        ("val_loader = DataLoader(Noisy(range(500, 600), 0.3), batch_size=40)", SCORE),
        (  # shuffled: the same examples in another order
            "val_loader = DataLoader(Noisy(range(500, 600), 0.3), batch_size=40, shuffle=True)",
            SCORE,
        ),
        (  # no_grad inside the loop: the batches are drawn with gradients on
            "val_loader = DataLoader(Noisy(range(500, 600), 0.3), batch_size=40)",
            """correct = 0
    for xb, yb in val_loader:
        with torch.no_grad():
            correct += (model(xb).argmax(1) == yb).sum().item()""",
        ),
    ],
)
def test_evaluation_passes_with_inputs_drawn_anew_are_named(
    doctor_script: Doctor, val: str, evaluate: str
) -> None:
    found = _run(doctor_script, val, evaluate)
    assert len(found) == 1, found
    assert found[0]["evidence"]["tensor"] == 0
    assert found[0]["evidence"]["found"] < 0.1
    assert "script.py" in found[0]["where"]


def test_a_validation_subset_of_an_augmented_dataset_is_named(doctor_script: Doctor) -> None:
    """random_split of a dataset with a random transform: the Subsets share it."""
    found = _run(
        doctor_script,
        "val_loader = DataLoader(val_set, batch_size=40)",
        train="full = Noisy(range(600), 0.3)\ntrain_set, val_set = random_split(full, [500, 100])\nTRAIN = train_set  # ",
    )
    assert len(found) == 1, found


@pytest.mark.parametrize(
    ("val", "evaluate", "train"),
    [
        (  # one augmenting dataset split by two samplers: the validation indices their own
            "val_loader = DataLoader(full, batch_size=40, sampler=SubsetRandomSampler(range(500, 600)))",
            SCORE,
            "full = Noisy(range(600), 0.3)\nTRAIN = full  # ",
        ),
        (  # a loader made for each evaluation over one dataset
            "val_set = Noisy(range(500, 600), 0.3)",
            "val_loader = DataLoader(val_set, batch_size=40)\n    " + SCORE,
            "",
        ),
        (  # the labels a level down, in a dict
            "val_loader = DataLoader(Labelled(Noisy(range(500, 600), 0.3)), batch_size=40)",
            SCORE.replace("yb).sum()", "yb['label']).sum()"),
            "",
        ),
        (  # batches that are a Mapping but no dict (transformers' BatchEncoding, a UserDict)
            "val_loader = DataLoader(Noisy(range(500, 600), 0.3), batch_size=40, collate_fn=lambda b: UserDict(x=torch.stack([r[0] for r in b]), y=torch.stack([r[1] for r in b])))",
            SCORE.replace(
                "for xb, yb in val_loader", "for xb, yb in ((b['x'], b['y']) for b in val_loader)"
            ),
            "",
        ),
    ],
)
def test_random_evaluations_split_by_samplers_remade_or_nested_are_named(
    doctor_script: Doctor, val: str, evaluate: str, train: str
) -> None:
    train_loader = (
        "train_loader = DataLoader(TRAIN, batch_size=50, sampler=SubsetRandomSampler(range(500)))"
    )
    found = doctor_script(
        SCRIPT.replace("VALIDATION_LOADER", val)
        .replace("SCORING", evaluate)
        .replace("TRAIN = ", train or "TRAIN = ")
        .replace(
            "train_loader = DataLoader(TRAIN, batch_size=50, shuffle=True)",
            train_loader
            if train
            else "train_loader = DataLoader(TRAIN, batch_size=50, shuffle=True)",
        ),
        CODE,
    )
    assert len(found) == 1, found


@pytest.mark.parametrize(
    ("val", "evaluate"),
    [
        ("val_loader = DataLoader(Noisy(range(500, 600), 0.0), batch_size=40)", SCORE),
        (  # shuffled, inputs fixed
            "val_loader = DataLoader(Noisy(range(500, 600), 0.0), batch_size=40, shuffle=True)",
            SCORE,
        ),
        (  # a new random sample of examples each evaluation (a loader made each time)
            "pool = Noisy(range(500, 600), 0.0)",
            """val_loader = DataLoader(pool, batch_size=40, sampler=torch.randperm(100)[:80].tolist())
    """
            + SCORE,
        ),
        (  # a fresh loader over a rebuilt set each epoch: new examples, new labels
            "val_loader = None",
            """fresh = torch.randn(100, 16)
    val_loader = DataLoader(TensorDataset(fresh, (fresh[:, 0] > 0).long()), batch_size=40)
    """
            + SCORE,
        ),
        (  # a training accuracy over the (augmented) training set, under no_grad
            "val_loader = DataLoader(TRAIN, batch_size=50)",
            SCORE,
        ),
        (  # each evaluation a new dataset at the last one's address, of other data
            "val_loader = None",
            """val_loader = DataLoader(Noisy(range(500 + epoch, 600 + epoch), 0.0), batch_size=40)
    """
            + SCORE,
        ),
        (  # words masked at random, a masked language model's: no label the same
            "val_loader = DataLoader(Masked(), batch_size=40)",
            "ids, mask = next(iter(val_loader)); [b for b in val_loader]",
        ),
        (  # dropout left on for the evaluation: the model is random, not its inputs
            "val_loader = DataLoader(Noisy(range(500, 600), 0.0), batch_size=40)",
            "model.train()\n    " + SCORE,
        ),
    ],
)
def test_evaluations_of_fixed_inputs_or_other_examples_are_not_named(
    doctor_script: Doctor, val: str, evaluate: str
) -> None:
    assert _run(doctor_script, val, evaluate) == []

"""``splits-overlap``: an evaluation's DataLoader that shares rows with the training one's, both
split from one dataset (``random_split`` called twice, samplers over index lists that overlap,
slices of one tensor that overlap); and splits that do not: one ``random_split``, an evaluation
of part of the training rows, an evaluation over the whole dataset, a k-fold loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "splits-overlap"
HEAD = """
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Subset, SubsetRandomSampler, TensorDataset, random_split

torch.manual_seed(0)
features = torch.randn(500, 8)
labels = (features[:, 0] > 0).long()
data = TensorDataset(features, labels)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def run(train_loader, val_loader, epochs=3):
    for _ in range(epochs):
        model.train()
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            for x, y in val_loader:
                model(x)


"""


def _doctor(doctor_script: Doctor, body: str) -> list[dict[str, Any]]:
    return doctor_script(HEAD + body, CODE)


def test_random_split_called_twice_is_named_where_the_evaluation_iterates(
    doctor_script: Doctor,
) -> None:
    body = (
        "train_set, _ = random_split(data, [400, 100])\n"
        "_, val_set = random_split(data, [400, 100])\n"
        "run(DataLoader(train_set, batch_size=32, shuffle=True), DataLoader(val_set, batch_size=50))\n"
    )
    found = _doctor(doctor_script, body)
    assert len(found) == 1
    assert found[0]["where"].endswith("script.py:25")  # the evaluation's loop
    assert found[0]["evidence"]["evaluated_rows"] == 100
    assert 60 <= found[0]["evidence"]["shared"] <= 95  # about 80 of 100


def test_samplers_over_index_lists_that_overlap_are_named(doctor_script: Doctor) -> None:
    body = (
        "train_idx, val_idx = torch.randperm(500)[:400], torch.randperm(500)[400:]\n"
        "run(DataLoader(data, batch_size=32, sampler=SubsetRandomSampler(train_idx)),\n"
        "    DataLoader(data, batch_size=50, sampler=SubsetRandomSampler(val_idx)))\n"
    )
    assert len(_doctor(doctor_script, body)) == 1


def test_slices_of_one_tensor_that_overlap_are_named(doctor_script: Doctor) -> None:
    body = (
        "train = TensorDataset(features[:400], labels[:400])\n"
        "val = TensorDataset(features[300:], labels[300:])\n"
        "run(DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=50))\n"
    )
    found = _doctor(doctor_script, body)
    assert len(found) == 1
    assert found[0]["evidence"]["shared"] == 100


def test_a_concatenation_of_parts_that_overlaps_the_evaluation_is_named(
    doctor_script: Doctor,
) -> None:
    body = (
        "from torch.utils.data import ConcatDataset\n"
        "order = torch.randperm(500)\n"
        "train = ConcatDataset([Subset(data, order[:200]), Subset(data, order[200:400])])\n"
        "run(DataLoader(train, batch_size=32, shuffle=True),\n"
        "    DataLoader(Subset(data, order[350:]), batch_size=50))\n"
    )
    found = _doctor(doctor_script, body)
    assert len(found) == 1
    assert found[0]["evidence"]["shared"] == 50


def test_one_split_is_clean(doctor_script: Doctor) -> None:
    body = (
        "train_set, val_set = random_split(data, [400, 100])\n"
        "run(DataLoader(train_set, batch_size=32, shuffle=True), DataLoader(val_set, batch_size=50))\n"
        "train = TensorDataset(features[:400], labels[:400])\n"
        "val = TensorDataset(features[400:], labels[400:])\n"
        "run(DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=50))\n"
    )
    assert _doctor(doctor_script, body) == []


def test_evaluations_of_training_rows_or_of_the_whole_dataset_are_clean(
    doctor_script: Doctor,
) -> None:
    # training accuracy over part of the training split, and a score over every row
    body = (
        "train_set, val_set = random_split(data, [400, 100])\n"
        "part = Subset(train_set, range(100))\n"
        "run(DataLoader(train_set, batch_size=32, shuffle=True), DataLoader(part, batch_size=50))\n"
        "run(DataLoader(train_set, batch_size=32, shuffle=True), DataLoader(data, batch_size=50))\n"
    )
    assert _doctor(doctor_script, body) == []


def test_a_k_fold_loop_is_judged_fold_by_fold(doctor_script: Doctor) -> None:
    # one model and optimiser over the folds (evaluation-data-trained-on's business): each
    # fold's validation rows are compared with that fold's training rows only
    body = (
        "folds = torch.randperm(500).chunk(5)\n"
        "for k in range(5):\n"
        "    train_idx = torch.cat([f for i, f in enumerate(folds) if i != k])\n"
        "    run(DataLoader(Subset(data, train_idx), batch_size=32, shuffle=True),\n"
        "        DataLoader(Subset(data, folds[k]), batch_size=50), epochs=1)\n"
    )
    assert _doctor(doctor_script, body) == []

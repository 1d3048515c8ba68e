"""``evaluation-data-trained-on``: rows fingerprinted exactly whatever the batch, phases cut by
a new optimiser, and weights that went on told from weights reset by their version counter."""

from __future__ import annotations

import torch
from torch import nn

from treeqa.health.findings import Finding
from treeqa.health.heldout import HeldOut


def test_a_rows_fingerprint_is_the_same_in_any_batch_and_differs_between_rows() -> None:
    held = HeldOut(lambda found: None)
    x = torch.randn(64, 20)
    alone = held._fingerprints(x[5:6])
    assert held._fingerprints(x[[9, 5, 1]])[1] == alone
    assert held._fingerprints(x).unique().numel() == 64
    tokens = torch.randint(0, 50, (16, 3000))  # more elements than are read
    assert held._fingerprints(tokens[[3]]) == held._fingerprints(tokens)[3]
    half = x.half()
    assert held._fingerprints(half[[2, 5]])[1] == held._fingerprints(half)[5]


def _folds(reset: bool, evaluate_training_rows: bool = False) -> list[Finding]:
    """Three folds of 60 rows, each trained for 12 sampled steps of 16 rows by a new SGD
    over one model, then its validation rows (or the fold's training rows) evaluated."""
    found: list[Finding] = []
    held = HeldOut(found.append)
    rows = torch.randn(60, 8)
    folds = rows.chunk(3)
    model = nn.Linear(8, 2)
    step = 0
    for k in range(3):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        if reset:
            model.reset_parameters()
        training = torch.cat([f for j, f in enumerate(folds) if j != k])
        for i in range(12):
            batch = training[torch.randint(len(training), (16,))]
            held.forward((batch,), {}, True, step)
            model(batch).sum().backward()
            opt.step()
            if i == 0 and k > 0:
                held.new_optimiser(step)
            step += 1
            held.stepped(step, opt)
        with torch.no_grad():
            held.forward((training if evaluate_training_rows else folds[k],), {}, True, step)
    held.judge(step)
    return found


def test_a_model_reused_across_folds_is_named_at_the_first_fold_it_leaks_into() -> None:
    found = _folds(reset=False)
    assert [f.code for f in found] == ["evaluation-data-trained-on"]
    assert found[0].evidence["phase_began"] == 13  # fold 1's first step
    assert found[0].evidence["rows"] == 20


def test_weights_reset_in_place_and_the_training_rows_scored_are_not_named() -> None:
    assert _folds(reset=True) == []  # reset_parameters() after the optimiser was made
    assert _folds(reset=False, evaluate_training_rows=True) == []

"""``evaluation-data-trained-on``: rows fingerprinted exactly whatever the batch, phases cut by
a new optimiser, and weights that went on told from weights reset, through autograd or
``.data``."""

from __future__ import annotations

import torch
from torch import nn

from treeqa.health.findings import Finding
from treeqa.health.heldout import HeldOut


def _fingerprints(held: HeldOut, *args: torch.Tensor) -> torch.Tensor:
    found = held._fingerprints(args, {})
    assert found is not None
    return found


def test_a_rows_fingerprint_is_the_same_in_any_batch_and_differs_between_rows() -> None:
    held = HeldOut(lambda found: None)
    x = torch.randn(64, 20)
    alone = _fingerprints(held, x[5:6])
    assert _fingerprints(held, x[[9, 5, 1]])[1] == alone
    assert _fingerprints(held, x).unique().numel() == 64
    tokens = torch.randint(0, 50, (16, 3000))  # more elements than are read
    assert _fingerprints(held, tokens[[3]]) == _fingerprints(held, tokens)[3]
    half = x.half()
    assert _fingerprints(held, half[[2, 5]])[1] == _fingerprints(held, half)[5]
    pairs = torch.randint(0, 9, (64, 2))
    assert _fingerprints(held, x, pairs)[7] == _fingerprints(held, x[[7]], pairs[[7]])
    assert _fingerprints(held, x, pairs)[7] != _fingerprints(held, x[[7]], pairs[[7]] + 1)
    ids = torch.arange(64)  # one integer a row: a user, a timestep
    assert _fingerprints(held, ids, x)[7] == _fingerprints(held, x)[7]  # left out
    assert held._fingerprints((ids,), {"step": ids}) is None  # ids alone: no rows of data


def _folds(reset: str = "", evaluate: str = "validation") -> list[Finding]:
    """Three folds of 60 rows, each trained for 12 sampled steps of 16 rows by a new SGD
    over one model, then its validation rows (or the fold's training rows, or another
    task's) evaluated. ``reset``: "" (none), "autograd" or "data"."""
    found: list[Finding] = []
    held = HeldOut(found.append)
    rows = torch.randn(60, 8)
    folds = rows.chunk(3)
    model = nn.Linear(8, 2)
    goal = torch.randn(8, 2)
    first = [p.detach().clone() for p in model.parameters()]
    step = 0
    for k in range(3):
        opt = torch.optim.SGD(model.parameters(), lr=0.02)
        if reset == "autograd":
            model.reset_parameters()
        elif reset == "data":  # the version counter does not see it
            for p, p0 in zip(model.parameters(), first, strict=True):
                p.data.copy_(p0)
        training = torch.cat([f for j, f in enumerate(folds) if j != k])
        if evaluate == "another task" and k > 0:
            training = torch.randn(40, 8)
        for i in range(12):
            batch = training[torch.randint(len(training), (16,))]
            held.forward((batch,), {}, True, True, step)
            opt.zero_grad()
            (model(batch) - batch @ goal).pow(2).mean().backward()
            opt.step()
            if i == 0 and k > 0:
                held.new_optimiser(step)
            step += 1
            held.stepped(step, opt)
        scored = folds[k] if evaluate in ("validation", "another task") else training
        with torch.no_grad():
            held.forward((scored if k < 2 else folds[0],), {}, False, True, step)
    held.judge(step)
    return found


def test_a_model_reused_across_folds_is_named_at_the_first_fold_it_leaks_into() -> None:
    found = _folds()
    assert [f.code for f in found] == ["evaluation-data-trained-on"]
    assert found[0].evidence["phase_began"] == 13  # fold 1's first step
    assert found[0].evidence["rows"] == 20


def test_weights_reset_and_the_training_rows_scored_are_not_named() -> None:
    assert _folds(reset="autograd") == []  # reset_parameters() after the optimiser was made
    assert _folds(reset="data") == []  # p.data.copy_(initial): values back where they began
    assert _folds(evaluate="training") == []


def test_an_earlier_tasks_rows_scored_after_another_task_are_not_named() -> None:
    """Phases that share no training rows (continual learning) are no folds."""
    assert _folds(evaluate="another task") == []

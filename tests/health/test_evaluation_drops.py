"""``evaluation-drops-examples``: an evaluation drawn from a DataLoader that drops its last,
smaller batch (``drop_last=True``, or a ``BatchSampler``'s); and loaders that drop nothing, or
drop batches where no evaluation reads them (training, batch-norm statistics recomputed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "evaluation-drops-examples"
HEAD = """
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, Subset, TensorDataset

torch.manual_seed(0)
x = torch.randn(700, 6)
y = (x[:, 0] > 0).long()
train = DataLoader(TensorDataset(x[:500], y[:500]), batch_size=32, shuffle=True, drop_last=True)
held = TensorDataset(x[500:VAL_END], y[500:VAL_END])
val = LOADER
model = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    model.train()
    for xb, yb in train:
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    SCORE
"""
LOOP = """model.eval()
    with torch.no_grad():
        correct = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val)"""


def _run(doctor: Doctor, val: str, evaluate: str = LOOP, end: int = 700) -> list[dict[str, Any]]:
    script = HEAD.replace("VAL_END", str(end)).replace("LOADER", val)
    return doctor(script.replace("SCORE", evaluate), CODE)


@pytest.mark.parametrize(
    ("val", "shuffled"),
    [
        ("DataLoader(held, batch_size=64, drop_last=True)", False),
        ("DataLoader(held, batch_size=64, shuffle=True, drop_last=True)", True),
        ("DataLoader(held, batch_sampler=BatchSampler(SequentialSampler(held), 64, True))", False),
    ],
)
def test_an_evaluation_over_a_loader_that_drops_its_last_batch_is_named(
    doctor_script: Doctor, val: str, shuffled: bool
) -> None:
    found = _run(doctor_script, val)
    assert len(found) == 1, found
    assert found[0]["evidence"] == {"dropped": 8, "examples": 200, "batch_size": 64}
    assert ("different subset" in found[0]["message"]) == shuffled
    assert found[0]["where"].endswith(":23")  # the evaluation's loop


def test_an_evaluation_over_the_same_loader_twice_is_named(doctor_script: Doctor) -> None:
    """Two passes over one loader that drops its last batch (accuracy, then a loss) leave out
    the same examples: the second covers nothing the first did not."""
    twice = (
        LOOP
        + """
        loss = sum(nn.functional.cross_entropy(model(xb), yb).item() for xb, yb in val)"""
    )
    assert _run(doctor_script, "DataLoader(held, batch_size=64, drop_last=True)", twice)


def test_loaders_that_drop_nothing_pass(doctor_script: Doctor) -> None:
    assert not _run(doctor_script, "DataLoader(held, batch_size=64)")
    assert not _run(doctor_script, "DataLoader(held, batch_size=64, drop_last=True)", end=692)


def test_passes_that_are_no_evaluation_pass(doctor_script: Doctor) -> None:
    """Batch-norm statistics recomputed without gradients over the training set
    (``update_bn``), and an evaluation over tensors after the training loader's pass, which
    drops its last batch."""
    recompute = """model.train()
    with torch.no_grad():
        for xb, _ in DataLoader(train.dataset, batch_size=64, drop_last=True):
            model(xb)"""
    assert not _run(doctor_script, "None", recompute)
    tensors = """model.eval()
    with torch.no_grad():
        correct = (model(x[500:]).argmax(1) == y[500:]).sum().item()"""
    assert not _run(doctor_script, "None", tensors)


def test_a_second_loader_over_the_tail_that_the_first_drops_passes(doctor_script: Doctor) -> None:
    """Batches of one size for the most (static shapes), then a loader over the 8 left: every
    example scored. The tail forgotten, the evaluation is named at the clock's next step."""
    both = """model.eval()
    with torch.no_grad():
        for loader in (val, DataLoader(Subset(held, range(192, 200)), batch_size=64)):
            correct = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in loader)"""
    val = "DataLoader(held, batch_size=64, drop_last=True)"
    assert not _run(doctor_script, val, both)
    assert _run(doctor_script, val, both.replace("range(192, 200)", "range(192, 196)"))


BEFORE = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(700, 6)
y = (x[:, 0] > 0).long()
held = DataLoader(TensorDataset(x[500:], y[500:]), batch_size=64, drop_last=True)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
scored = SCORED
scored.eval()
with torch.no_grad():
    baseline = sum((scored(xb).argmax(1) == yb).sum().item() for xb, yb in held)
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(0, 500, 25):
    loss = nn.functional.cross_entropy(model(x[i : i + 25]), y[i : i + 25])
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_baseline_before_the_first_step_is_named_when_its_model_trains(
    doctor_script: Doctor,
) -> None:
    """Before the clock's first step the models it trains are not known: an evaluation then is
    held, and named at the first step where its model is one the clock trains (not a teacher
    that scored the same loader)."""
    assert doctor_script(BEFORE.replace("SCORED", "model"), CODE)
    assert not doctor_script(BEFORE.replace("SCORED", "nn.Linear(6, 2)"), CODE)

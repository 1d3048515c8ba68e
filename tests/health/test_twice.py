"""``loss-averaged-twice``: a mean loss divided by its batch's rows again before backward,
under an optimiser whose step scales with the gradient (SGD, or an L2 decay added to it); and
divisions that are right (a sum over the batch, k micro-batches accumulated) or change nothing
(Adam without decay)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from treeqa.health import twice

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "loss-averaged-twice"
HEAD = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(640, 8)
y = (x[:, 0] > 0).long()
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = OPTIMISER
for epoch in range(2):
    for i in range(0, 640, 32):
        xb, yb = x[i : i + 32], y[i : i + 32]
        loss = LOSS
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
SGD = "torch.optim.SGD(model.parameters(), lr=0.1)"


def _run(doctor: Doctor, loss: str, optimiser: str = SGD) -> list[dict[str, Any]]:
    return doctor(HEAD.replace("OPTIMISER", optimiser).replace("LOSS", loss), CODE)


@pytest.mark.parametrize(
    "loss",
    [
        "F.cross_entropy(model(xb), yb) / len(xb)",
        "F.cross_entropy(model(xb), yb) * (1.0 / xb.size(0))",
        "nn.CrossEntropyLoss()(model(xb), yb).div(32)",
        "F.mse_loss(model(xb)[:, 0], yb.float()) / 32",
        "F.binary_cross_entropy_with_logits(model(xb)[:, 0], yb.float()) / len(yb)",
        "(F.cross_entropy(model(xb), yb) + 0.1 * F.mse_loss(model(xb)[:, 0], yb.float())) / 32",
        "((model(xb)[:, 0] - yb.float()) ** 2).mean() / len(xb)",  # a mean by hand
        "F.cross_entropy(model(xb), yb) / torch.tensor(32.0)",
    ],
)
def test_a_mean_divided_by_its_rows_under_sgd_is_named(doctor_script: Doctor, loss: str) -> None:
    found = _run(doctor_script, loss)
    assert len(found) == 1, found
    assert found[0]["evidence"]["rows"] == 32
    assert found[0]["evidence"]["optimizer"] == "SGD"
    line = ":16" if "by hand" in found[0]["evidence"]["loss"] else ":14"  # backward's, the loss's
    assert found[0]["where"].endswith(line)


def test_adam_is_named_only_where_its_weight_decay_is_added_to_the_gradient(
    doctor_script: Doctor,
) -> None:
    loss = "F.cross_entropy(model(xb), yb) / len(xb)"
    coupled = _run(doctor_script, loss, "torch.optim.Adam(model.parameters(), weight_decay=1e-2)")
    assert len(coupled) == 1 and "weight_decay" in coupled[0]["message"]
    assert not _run(doctor_script, loss, "torch.optim.Adam(model.parameters())")
    assert not _run(doctor_script, loss, "torch.optim.AdamW(model.parameters())")


@pytest.mark.parametrize(
    "loss",
    [
        "F.cross_entropy(model(xb), yb)",
        "F.cross_entropy(model(xb), yb, reduction='sum') / len(xb)",  # a sum: right
        "F.cross_entropy(model(xb), yb) / 4",  # a constant that is not the rows
        "F.cross_entropy(model(xb), yb) * 0.5",
        "F.cross_entropy(model(xb), yb) * 32 / 1024",  # a sum over 1,024 rows estimated
    ],
)
def test_losses_that_are_not_a_mean_over_its_rows_again_pass(
    doctor_script: Doctor, loss: str
) -> None:
    assert not _run(doctor_script, loss)


def test_micro_batches_accumulated_each_divided_by_their_count_pass(doctor_script: Doctor) -> None:
    """8 micro-batches of 8 rows, each loss / 8: the mean over the 64 rows a step, right,
    though each is a mean over 8 rows times 1/8."""
    script = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1280, 8)
y = (x[:, 0] > 0).long()
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(0, 1280, 64):
    opt.zero_grad()
    for j in range(i, i + 64, 8):
        loss = F.cross_entropy(model(x[j : j + 8]), y[j : j + 8]) / 8
        loss.backward()
    opt.step()
"""
    assert not doctor_script(script, CODE)
    single = script.replace("for j in range(i, i + 64, 8):", "for j in [i]:")
    assert doctor_script(single, CODE)  # one micro-batch a step, / 8: twice
    # 2 micro-batches of 32 a step, each divided by its 32 rows (by 2 was meant): twice
    halves = script.replace("range(i, i + 64, 8)", "range(i, i + 64, 32)")
    halves = halves.replace("j : j + 8", "j : j + 32").replace(") / 8", ") / 32")
    assert doctor_script(halves, CODE)


def test_mean_reduced_reads_the_reduction_and_the_legacy_flags() -> None:
    x, t = torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)
    assert twice.mean_reduced("cross_entropy", (x, t), {})
    assert not twice.mean_reduced("cross_entropy", (x, t), {"reduction": "sum"})
    assert not twice.mean_reduced("cross_entropy", (x, t, None, None, -100, None, "sum"), {})
    assert twice.mean_reduced("cross_entropy", (x, t, None, None, -100, None, "mean"), {})
    assert not twice.mean_reduced("cross_entropy", (x, t), {"size_average": False})
    assert not twice.mean_reduced("mse_loss", (x, x, False), {})
    assert twice.mean_reduced("huber_loss", (x, x, "mean"), {})
    assert not twice.mean_reduced("kl_div", (x, x), {})


LANGUAGE_MODEL = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
ids = torch.randint(0, 20, (640, 13))
model = nn.Sequential(nn.Embedding(20, 16), nn.Linear(16, 20))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for epoch in range(2):
    for i in range(0, 640, 16):
        x, y = ids[i : i + 16, :-1], ids[i : i + 16, 1:]
        logits = model(x)  # [16, 12, 20]
        loss = LOSS
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_token_mean_divided_by_the_models_batch_is_named(doctor_script: Doctor) -> None:
    """Logits ``[B * T, V]`` over ``[B, T]`` ids: the mean over the tokens divided by B (the
    model's batch) or by B * T (its rows) is twice; a sum over the tokens divided by B is a
    loss a sequence, once."""
    flat = "F.cross_entropy(logits.reshape(-1, 20), y.reshape(-1){}) / {}"
    by_batch = doctor_script(LANGUAGE_MODEL.replace("LOSS", flat.format("", "len(x)")), CODE)
    assert len(by_batch) == 1 and by_batch[0]["evidence"]["rows"] == 16
    by_rows = doctor_script(LANGUAGE_MODEL.replace("LOSS", flat.format("", "y.numel()")), CODE)
    assert len(by_rows) == 1 and by_rows[0]["evidence"]["rows"] == 192
    summed = flat.format(", reduction='sum'", "len(x)")
    assert not doctor_script(LANGUAGE_MODEL.replace("LOSS", summed), CODE)

"""``threshold-off-scale``: a binary model's predictions read off its output on the wrong scale
(logits rounded or read at 0.5, probabilities read at 0 or through a second sigmoid); and the
read-outs that match the scale its training loss gives it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "threshold-off-scale"
SCRIPT = """
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(1200, 10)
y = ((x @ torch.randn(10) + 0.8 * torch.randn(1200)) > 0).float()
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1)HEAD)
loss_fn = LOSS
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    model.train()
    for i in range(0, 1000, 50):
        out = model(x[i : i + 50]).squeeze(1)
        loss = loss_fn(out, y[i : i + 50])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        out = model(x[1000:]).squeeze(1)
        accuracy = (READ == y[1000:]).float().mean().item()
"""
LOGITS = ("", "nn.BCEWithLogitsLoss()")
PROBABILITIES = (", nn.Sigmoid()", "nn.BCELoss()")


def _run(doctor: Doctor, scale: tuple[str, str], read: str) -> list[dict[str, Any]]:
    head, loss = scale
    script = SCRIPT.replace("HEAD", head).replace("LOSS", loss).replace("READ", read)
    return doctor(script, CODE)


@pytest.mark.parametrize(
    ("scale", "read", "shown"),
    [
        (LOGITS, "torch.round(out)", "round"),
        (LOGITS, "out.round()", "round"),
        (LOGITS, "(out > 0.5).float()", "out > 0.5"),
        (LOGITS, "out.ge(0.5).float()", "out >= 0.5"),
        (LOGITS, "torch.where(out > torch.tensor(0.5), 1.0, 0.0)", "out > 0.5"),
        (PROBABILITIES, "(out > 0).float()", "out > 0"),
        (PROBABILITIES, "(torch.sigmoid(out) > 0.5).float()", "sigmoid(out) > 0.5"),
    ],
)
def test_a_read_out_on_the_wrong_scale_is_named(
    doctor_script: Doctor, scale: tuple[str, str], read: str, shown: str
) -> None:
    found = _run(doctor_script, scale, read)
    assert len(found) == 1, found
    assert found[0]["evidence"]["read"] == shown
    assert found[0]["evidence"]["share_misread"] > 0
    assert found[0]["severity"] == "error"
    assert "script.py" in found[0]["where"]


@pytest.mark.parametrize(
    ("scale", "read"),
    [
        (LOGITS, "(out > 0).float()"),
        (LOGITS, "(torch.sigmoid(out) > 0.5).float()"),
        (LOGITS, "torch.sigmoid(out).round()"),
        (PROBABILITIES, "(out > 0.5).float()"),
        (PROBABILITIES, "out.round()"),
        (PROBABILITIES, "(out >= 0.3).float()"),  # a threshold tuned on probabilities
    ],
)
def test_a_read_out_on_its_scale_is_clean(
    doctor_script: Doctor, scale: tuple[str, str], read: str
) -> None:
    assert _run(doctor_script, scale, read) == []


JOINED = """
    model.eval()
    with torch.no_grad():
        outs = [model(x[i : i + 50]).squeeze(1) for i in range(1000, 1200, 50)]
        accuracy = ((torch.cat(outs) > 0.5).float() == y[1000:]).float().mean().item()
"""


def test_an_evaluations_outputs_joined_then_read_at_half_are_named(doctor_script: Doctor) -> None:
    """Outputs gathered batch by batch and joined by ``torch.cat`` keep their scale."""
    script = SCRIPT.replace("HEAD", "").replace("LOSS", "nn.BCEWithLogitsLoss()")
    script = script.split("    model.eval()")[0] + JOINED
    found = doctor_script(script, CODE)
    assert len(found) == 1, found
    assert found[0]["evidence"]["read"] == "out > 0.5"


def test_logits_whose_sigmoid_the_loop_gave_the_loss_are_read_as_logits(
    doctor_script: Doctor,
) -> None:
    """``binary_cross_entropy(torch.sigmoid(out), y)``: the output is logits."""
    script = SCRIPT.replace("HEAD", "").replace("READ", "(out > 0.5).float()")
    script = script.replace("LOSS", "nn.BCELoss()").replace(
        "loss = loss_fn(out,", "loss = loss_fn(torch.sigmoid(out),"
    )
    found = doctor_script(script, CODE)
    assert len(found) == 1, found


@pytest.mark.parametrize(
    "read",
    [
        # a margin in logit units, both ways: no prediction
        "((out > 0.5) | (out < -0.5)).float() + 0 * y[1000:]",
        # a probability threshold converted to log-odds, on purpose
        "(out > math.log(0.6 / 0.4)).float()",
    ],
)
def test_logits_read_against_a_margin_or_a_log_odds_are_clean(
    doctor_script: Doctor, read: str
) -> None:
    script = "import math\n" + SCRIPT.replace("HEAD", "").replace("LOSS", "nn.BCEWithLogitsLoss()")
    assert doctor_script(script.replace("READ", read), CODE) == []


def test_a_model_that_returns_its_sigmoid_in_eval_mode_is_clean(doctor_script: Doctor) -> None:
    """Trained on logits, it gives probabilities in eval mode: read at 0.5, all in [0, 1]."""
    script = SCRIPT.replace(
        "model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1)HEAD)",
        """class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        out = self.body(x)
        return out if self.training else torch.sigmoid(out)


model = Net()""",
    )
    script = script.replace("LOSS", "nn.BCEWithLogitsLoss()")
    for read in ("(out > 0.5).float()", "out.round()"):
        assert doctor_script(script.replace("READ", read), CODE) == []


def test_a_sanity_check_of_probabilities_against_0_is_clean(doctor_script: Doctor) -> None:
    script = SCRIPT.replace("HEAD", ", nn.Sigmoid()").replace("LOSS", "nn.BCELoss()")
    read = "(out > 0.5).float() + 0 * (out >= 0).all() + 0 * (out < 0).sum()"
    assert doctor_script(script.replace("READ", read), CODE) == []


def test_two_models_keep_their_own_scales(doctor_script: Doctor) -> None:
    """A teacher ending in a sigmoid, then a student on logits read at 0: each its own."""
    teacher = SCRIPT.replace("HEAD", ", nn.Sigmoid()").replace("LOSS", "nn.BCELoss()")
    teacher = teacher.replace("READ", "(out > 0.5).float()")
    student = SCRIPT.replace("HEAD", "").replace("LOSS", "nn.BCEWithLogitsLoss()")
    student = student.replace("READ", "(out > 0).float()").split("model = ", 1)[1]
    assert doctor_script(teacher + "\nteacher = model\nmodel = " + student, CODE) == []


def test_a_regression_rounded_on_purpose_is_clean(doctor_script: Doctor) -> None:
    """Outputs trained under a mean squared error have the targets' scale: rounding them to
    the nearest class, or reading them at 0.5, is the script's choice."""
    for read in ("out.round()", "(out > 0.5).float()"):
        assert _run(doctor_script, ("", "nn.MSELoss()"), read) == []

"""``losses-not-backpropagated``: a loop that computes every batch's loss and backpropagates a
few (the backward after the loop over batches, an accumulation that backpropagates one batch in
k); and what is not that: losses summed before one backward, a validation with its loss once an
epoch (``evaluation-with-gradients``), a loss logged by class beside the trained one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "losses-not-backpropagated"
HEAD = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
features = torch.randn(640, 8)
labels = (features @ torch.randn(8, 3)).argmax(1)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def batches():
    order = torch.randperm(512)
    for i in range(0, 512, 32):
        yield features[order[i : i + 32]], labels[order[i : i + 32]]


"""


def _doctor(doctor_script: Doctor, body: str) -> list[dict[str, Any]]:
    return doctor_script(HEAD + body, CODE)


def test_a_backward_after_the_loop_over_batches_is_named_at_the_backward(
    doctor_script: Doctor,
) -> None:
    body = (
        "for epoch in range(8):\n"
        "    for x, y in batches():\n"
        "        loss = F.cross_entropy(model(x), y)\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
    )
    found = doctor_script(HEAD + body, CODE)
    assert len(found) == 1
    assert found[0]["severity"] == "warning"
    assert found[0]["where"].endswith("script.py:23")  # the backward
    assert found[0]["evidence"]["losses_left_out"] == [15, 15, 15]
    # the forwards were the training loop's, not an evaluation's
    assert doctor_script(HEAD + body, "evaluation-with-gradients") == []


def test_an_accumulation_that_backpropagates_one_batch_in_four_is_named(
    doctor_script: Doctor,
) -> None:
    body = (
        "for epoch in range(3):\n"
        "    for i, (x, y) in enumerate(batches()):\n"
        "        loss = F.cross_entropy(model(x), y) / 4\n"
        "        if (i + 1) % 4 == 0:\n"
        "            loss.backward()\n"
        "            opt.step()\n"
        "            opt.zero_grad()\n"
    )
    found = _doctor(doctor_script, body)
    assert len(found) == 1
    assert found[0]["evidence"]["losses_left_out"] == [3, 3, 3]


def test_losses_summed_before_one_backward_are_clean(doctor_script: Doctor) -> None:
    body = (
        "for epoch in range(3):\n"
        "    total = 0\n"
        "    for i, (x, y) in enumerate(batches()):\n"
        "        total = total + F.cross_entropy(model(x), y) / 4\n"
        "        if (i + 1) % 4 == 0:\n"
        "            total.backward()\n"
        "            opt.step()\n"
        "            opt.zero_grad()\n"
        "            total = 0\n"
    )
    assert _doctor(doctor_script, body) == []


def test_a_validation_with_its_loss_once_an_epoch_is_an_evaluation(doctor_script: Doctor) -> None:
    # neither model.eval() nor no_grad: its forwards' graphs are recorded for nothing, which
    # evaluation-with-gradients says once the next training step shows it was no training
    body = (
        "for epoch in range(4):\n"
        "    for x, y in batches():\n"
        "        loss = F.cross_entropy(model(x), y)\n"
        "        opt.zero_grad()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "    for i in range(512, 640, 16):\n"
        "        val = F.cross_entropy(model(features[i : i + 16]), labels[i : i + 16]).item()\n"
    )
    assert _doctor(doctor_script, body) == []
    found = doctor_script(HEAD + body, "evaluation-with-gradients")
    assert len(found) == 1
    assert found[0]["where"].endswith("script.py:26")  # the validation's forward


def test_losses_logged_by_class_beside_the_trained_one_are_clean(doctor_script: Doctor) -> None:
    body = (
        "for epoch in range(3):\n"
        "    for x, y in batches():\n"
        "        out = model(x)\n"
        "        by_class = [F.cross_entropy(out[y == c], y[y == c]) for c in range(3)]\n"
        "        loss = F.cross_entropy(out, y)\n"
        "        opt.zero_grad()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
    )
    assert _doctor(doctor_script, body) == []

"""Soft targets of a cross-entropy that are sets of labels (multi-hot), not distributions."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health import loss_inputs
from treeqa.health.findings import Finding
from treeqa.health.losses import LossInputCheck


def _multi_hot(rows: int, classes: int, labels: int) -> torch.Tensor:
    target = torch.zeros(rows, classes)
    target[:, :labels] = 1.0
    return target[:, torch.randperm(classes)]


def test_rows_of_two_labels_or_more_are_named_with_their_counts() -> None:
    target = _multi_hot(8, 5, 1)
    target[:3] = _multi_hot(3, 5, 3)
    found = loss_inputs.multi_hot(target, 1, "cross_entropy")
    assert found is not None and found.code == "multi-hot-into-cross-entropy"
    assert found.evidence == {"function": "cross_entropy", "rows": 3, "of": 8, "classes": 5}
    assert "up to 3, summing to up to 3" in found.message
    per_token = _multi_hot(4 * 7, 6, 2).view(4, 7, 6).transpose(1, 2)  # [B, C, T]
    assert loss_inputs.multi_hot(per_token, 1, "cross_entropy") is not None


@pytest.mark.parametrize(
    "target",
    [
        F.one_hot(torch.arange(8) % 5, 5).float(),  # one-hot
        torch.randn(8, 5).softmax(1),  # a teacher's probabilities
        F.one_hot(torch.arange(8) % 5, 5).float() * 0.9 + 0.1 / 5,  # label smoothing by hand
        0.3 * F.one_hot(torch.arange(8) % 5, 5) + 0.7 * F.one_hot(torch.arange(8) % 3, 5),
        _multi_hot(8, 5, 2) / 2,  # a multi-hot divided by its row sum
        F.one_hot(torch.arange(8) % 5, 5).float() * 3.0,  # one label, weighted by hand
        torch.zeros(8, 5),  # masked rows
    ],
)
def test_distributions_weighted_labels_and_empty_rows_are_not_named(target: torch.Tensor) -> None:
    assert loss_inputs.multi_hot(target, 1, "cross_entropy") is None


def test_the_cross_entropies_of_a_sampled_step_are_read_once() -> None:
    found: list[Finding] = []
    check = LossInputCheck(found.append, lambda: True, lambda: False)
    logits = torch.randn(16, 6, requires_grad=True)
    check.install()
    try:
        F.cross_entropy(logits, torch.randn(16, 6).softmax(1))
        F.cross_entropy(logits.detach(), _multi_hot(16, 6, 2))  # no gradient: not training
        assert found == []
        nn.CrossEntropyLoss(label_smoothing=0.1)(logits, _multi_hot(16, 6, 2))
        F.cross_entropy(logits, _multi_hot(16, 6, 3))
    finally:
        check.uninstall()
    assert [f.code for f in found] == ["multi-hot-into-cross-entropy"]
    assert found[0].where.startswith(__file__)


def test_a_cross_entropy_written_by_hand_is_read_from_its_graph() -> None:
    found: list[Finding] = []
    check = LossInputCheck(found.append, lambda: True, lambda: False)
    logits = torch.randn(16, 6, requires_grad=True)
    check.backward(-(torch.randn(16, 6).softmax(1) * F.log_softmax(logits, 1)).sum(1).mean())
    assert found == []
    loss = torch.sum(-_multi_hot(16, 6, 2) * torch.log_softmax(logits, dim=-1), -1).mean()
    check.backward(loss)
    assert [f.code for f in found] == ["multi-hot-into-cross-entropy"]


def test_the_first_loss_against_multi_hot_targets_is_judged_per_unit_of_target() -> None:
    """k labels make the first loss k * log(C): no ``loss-at-init`` for that."""
    found: list[Finding] = []
    check = LossInputCheck(found.append, lambda: True, lambda: True)
    check.install()
    try:
        F.cross_entropy(torch.zeros(64, 10, requires_grad=True), _multi_hot(64, 10, 4))
    finally:
        check.uninstall()
    assert [f.code for f in found] == ["multi-hot-into-cross-entropy"]


def test_a_mean_over_positives_and_a_policys_weights_are_not_sets_of_labels() -> None:
    """A supervised contrastive loss divides each row's sum by its positives' count (a
    distribution, written late); a policy gradient weighs the actions sampled by their
    advantages, which are no labels."""
    found: list[Finding] = []
    check = LossInputCheck(found.append, lambda: True, lambda: False)
    similarities = torch.randn(16, 16, requires_grad=True)
    mask = _multi_hot(16, 16, 4)
    log_prob = F.log_softmax(similarities, dim=1)
    check.backward(-((mask * log_prob).sum(1) / mask.sum(1)).mean())
    advantages = torch.zeros(16, 6).scatter_(1, torch.randint(0, 6, (16, 3)), 0.9)
    check.backward(-(advantages * F.log_softmax(similarities[:, :6], -1)).sum(-1).mean())
    assert found == []
    assert loss_inputs.multi_hot(torch.tensor([[2.0, 3.0, 0.0]]), 1, "cross_entropy") is None


def test_a_sum_over_soft_targets_is_judged_per_unit_of_their_mass() -> None:
    """Per-token soft targets [B, C, T] whose padded positions are rows of zeros, summed (and
    divided by the real tokens after): the first sum is log(C) times the real tokens, not
    times the batch's rows."""
    found: list[Finding] = []
    check = LossInputCheck(found.append, lambda: True, lambda: True)
    soft = F.one_hot(torch.randint(0, 5, (64, 16)), 5).float() * 0.9 + 0.02  # [B, T, C]
    soft[:, 10:] = 0.0  # padding
    check.install()
    try:
        logits = torch.zeros(64, 5, 16, requires_grad=True)
        F.cross_entropy(logits, soft.transpose(1, 2), reduction="sum")
    finally:
        check.uninstall()
    assert found == []

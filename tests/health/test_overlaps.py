"""``dice-on-logits``: soft overlap ratios found in a loss's graph, and their scores read where
they are a model's output as it came out."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from treeqa.health.findings import Finding
from treeqa.health.overlaps import STEPS, Overlaps, ratios


def _scores_and_mask() -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.randn(4, 1, 6, 6, requires_grad=True) * 2  # a node of its own: the "output"
    return logits, (torch.rand(4, 1, 6, 6) > 0.5).float()


def test_dice_and_iou_ratios_name_their_scores() -> None:
    p, t = _scores_and_mask()
    inter = (p * t).sum((1, 2, 3))
    dice = 1 - ((2 * inter + 1) / (p.sum((1, 2, 3)) + t.sum((1, 2, 3)) + 1)).mean()
    assert ratios(dice.grad_fn) == [p.grad_fn]
    iou = 1 - (p * t).sum() / (p.sum() + t.sum() - (p * t).sum())
    assert ratios((iou + F.binary_cross_entropy_with_logits(p, t)).grad_fn) == [p.grad_fn]
    flat = p.reshape(-1)  # views between
    assert ratios((1 - 2 * (flat * t.reshape(-1)).sum() / (flat.sum() + t.sum())).grad_fn) == [
        p.grad_fn
    ]


def test_other_quotients_are_no_overlap_ratios() -> None:
    p, t = _scores_and_mask()
    weights = p.exp()
    estimate = (weights * t).sum((1, 2, 3)) / weights.sum((1, 2, 3))  # a weighted mean
    assert ratios(F.mse_loss(estimate, torch.ones(4)).grad_fn) == []  # not in the loss by sums
    assert ratios(((p * t).sum() / t.sum()).grad_fn) == []  # no scores in the denominator
    assert ratios(((p * p.detach() * t).sum() / p.sum()).grad_fn) == []  # a product of two
    # V-Net's squares: bounded and best at p = t for any real p (a heatmap's similarity)
    vnet = 1 - 2 * (p * t).sum() / ((p**2).sum() + (t**2).sum())
    assert ratios(vnet.grad_fn) == []


def _steps(output_of: str, steps: int) -> list[Finding]:
    """``steps`` sampled steps of a Dice over a model's output: ``output_of`` "logits", its
    "squeezed" logits (a view), "sigmoid" probabilities or "exp" weights (a weighted mean's)."""
    found: list[Finding] = []
    overlaps = Overlaps(found.append)
    for step in range(steps):
        logits, t = _scores_and_mask()
        output = {
            "logits": logits,
            "squeezed": logits.squeeze(1) if output_of == "squeezed" else logits,
            "sigmoid": torch.sigmoid(logits),
            "exp": logits.exp(),
        }[output_of]
        overlaps.forward_done(output, step)
        p = output.reshape(t.shape)
        loss = 1 - (2 * (p * t).sum() + 1) / (p.sum() + t.sum() + 1)
        overlaps.backward(loss)
    return found


def test_a_dice_over_the_models_logits_is_named_after_steps_in_a_row() -> None:
    assert _steps("logits", steps=STEPS - 1) == []
    found = _steps("logits", steps=STEPS)
    assert [f.code for f in found] == ["dice-on-logits"]
    assert found[0].evidence["lowest"] < 0
    assert [f.code for f in _steps("squeezed", steps=STEPS)] == ["dice-on-logits"]


def test_a_dice_over_probabilities_or_positive_weights_is_not_named() -> None:
    """A model that ends in a sigmoid; a weighted mean's weights above 1 (exp of scores)."""
    assert _steps("sigmoid", steps=2 * STEPS) == []
    assert _steps("exp", steps=2 * STEPS) == []

"""A Dice or IoU loss written by hand over raw logits (``dice-on-logits``).

A soft Dice ratio ``(2 * sum(p * t) + s) / (sum(p) + sum(t) + s)`` (IoU's ``sum(p * t) /
(sum(p) + sum(t) - sum(p * t))``) is meant over scores ``p`` in [0, 1]. Given the model's logits
where a sigmoid or softmax belongs, ``1 - dice`` is minimised by logits run off to large values
rather than by fitting the mask, and the segmentation it trains is wrong (the probe's U-Net
ended at an IoU of 0.0006, its loss rising 0.75 -> 1.08).

On sampled steps the trained model's outputs are kept until the backward, where the loss's graph
is walked (``ratios``): through sums, means, and constants added, subtracted or multiplied, to
each quotient whose numerator reduces a product of a tensor with gradients and one without, and
whose denominator reduces that same tensor, read through views. Where that tensor is a model's
output as it came out (a view of it too: ``logits.squeeze(1)``), its values are read (one host
read): any below 0, on ``STEPS`` sampled steps in a row, make the finding. Scores passed through
a sigmoid or softmax (by the loss or by the model) are other tensors, or in [0, 1]. Above 1
alone is no sign: a weighted mean ``sum(w * v) / sum(w)`` has the same form over weights that
are any non-negative numbers (a density map's, ``exp`` of scores), and is right to. V-Net's
squared denominator is not read: ``2 * sum(p * t) / (sum(p ** 2) + sum(t ** 2))`` is bounded and
best at ``p = t`` for any real ``p`` (a heatmap regression's similarity).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.loss_inputs import REDUCTIONS, VIEWS

STEPS = 3
"""Sampled steps in a row whose ratio's scores went below 0."""
BELOW = -0.01
"""How far below 0 a score is below it (rounding aside)."""
OUTPUTS = 8
"""The most model outputs of a sampled step kept until its backward."""
AROUND = re.compile(r"(Add|Sub|Rsub|Mul|Div|Neg)Backward\d")
"""Nodes a loss is walked down through to a quotient: sums and differences, constant factors."""


class Overlaps:
    """``add``: where the finding goes."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.outputs: list[torch.Tensor] = []  # the sampled step's model outputs, until backward
        self.step = 0  # the step they are of
        self.steps = 0  # sampled steps in a row whose ratio was over logits
        self.seen: tuple[float, float] | None = None  # their outputs' lowest and highest
        self.said = False

    def forward_done(self, output: Any, step: int) -> None:
        """A trained model's forward on sampled ``step`` returned ``output`` (its first tensors
        kept, with those of the step's other forwards, until the backward)."""
        if self.said:
            return
        values = output.values() if isinstance(output, dict) else output
        items = values if isinstance(values, list | tuple) else (values,)
        tensors = [t for t in list(items)[:4] if isinstance(t, torch.Tensor)]
        kept = [t for t in tensors if t.grad_fn is not None and t.is_floating_point()]
        if step != self.step:  # (a sampled step before, whose outputs no backward took)
            self.outputs, self.step = [], step
        self.outputs = (self.outputs + kept)[:OUTPUTS]

    def end_step(self) -> None:
        """A sampled step ended: outputs no backward took (gradients taken by
        ``torch.autograd.grad``) go with it, and their graphs."""
        self.outputs = []

    def backward(self, loss: torch.Tensor) -> None:
        """A backward of ``loss`` on a sampled step (before it frees the saved tensors)."""
        outputs, self.outputs = self.outputs, []
        if self.said or loss.grad_fn is None or not outputs:
            return
        scores = {id(node) for node in ratios(loss.grad_fn)}
        read = [t for t in outputs if id(t.grad_fn) in scores or id(_base(t.grad_fn)) in scores]
        if not read:
            return
        ends = torch.stack([torch.stack(t.detach().aminmax()) for t in read]).float().cpu()
        low, high = float(ends[:, 0].min()), float(ends[:, 1].max())  # (one host read)
        if low >= BELOW:  # (weights >= 0 of a weighted mean run above 1: only below 0 counts)
            self.steps, self.seen = 0, None
            return
        self.steps += 1
        seen = self.seen or (low, high)
        self.seen = (min(seen[0], low), max(seen[1], high))
        if self.steps >= STEPS:
            self.said = True
            found = dice_on_logits(*self.seen, self.steps)
            found.where = sites.user_site()
            self.add(found)


def ratios(node: Any, most: int = 24) -> list[Any]:
    """The scores (their autograd nodes) of the soft overlap ratios below the loss's ``node``,
    within ``most`` nodes (see the module's text)."""
    todo, seen, found = [node], 0, []
    while todo and seen < most:
        node = todo.pop()
        seen += 1
        name = type(node).__name__
        scores = _overlap(node) if name == "DivBackward0" else None
        if scores is not None:
            found.append(scores)
        elif name in REDUCTIONS or AROUND.fullmatch(name):
            todo.extend(n for n, _ in node.next_functions if n is not None)
    return found


def _overlap(div: Any) -> Any:
    """The scores' node where ``div``'s numerator reduces a product of scores (with
    gradients) and targets (without), and its denominator reduces the same scores (not their
    squares); else None."""
    numerator, denominator = (n for n, _ in div.next_functions)
    product = _reduced(_constants_off(numerator))
    if type(product).__name__ != "MulBackward0":
        return None
    sides = [n for n, _ in product.next_functions]
    if sum(n is not None for n in sides) != 1:  # the targets need no gradient
        return None
    scores = _base(next(n for n in sides if n is not None))
    todo, seen = [denominator], 0
    while todo and seen < 12:
        node = todo.pop()
        seen += 1
        if node is None:
            continue
        name = type(node).__name__
        if name in REDUCTIONS:
            if _base(node.next_functions[0][0]) is scores:
                return scores
        elif AROUND.fullmatch(name):
            todo.extend(n for n, _ in node.next_functions)
    return None


def _constants_off(node: Any) -> Any:
    """Down through ops on one tensor with gradients (a constant added or multiplied)."""
    for _ in range(4):
        inputs = [n for n, _ in node.next_functions if n is not None] if node is not None else []
        if len(inputs) != 1 or not AROUND.fullmatch(type(node).__name__):
            return node
        node = inputs[0]
    return node


def _reduced(node: Any) -> Any:
    """What a sum or mean (``node``, views above it) reduces, views below it skipped."""
    node = _base(node)
    if type(node).__name__ not in REDUCTIONS or not node.next_functions:
        return None
    return _base(node.next_functions[0][0])


def _base(node: Any) -> Any:
    for _ in range(6):
        if node is None or not VIEWS.fullmatch(type(node).__name__) or not node.next_functions:
            return node
        node = node.next_functions[0][0]
    return node


def dice_on_logits(low: float, high: float, steps: int) -> Finding:
    """The scores of a soft overlap ratio were the model's output, from ``low`` to ``high``
    over ``steps`` sampled steps in a row."""
    return Finding(
        "dice-on-logits",
        "warning",
        f"a Dice- or IoU-style ratio in the loss (2 * sum(p * t) / (sum(p) + sum(t))) takes "
        f"the model's output as its scores p, and that output ran from {low:.3g} to {high:.3g} "
        f"over {steps} sampled steps in a row, below 0: raw logits, where probabilities in "
        "[0, 1] belong, which 1 - dice drives off to large values instead of fitting the mask",
        evidence={"lowest": round(low, 4), "highest": round(high, 4), "steps": steps},
    )

"""The loss of predictions that ignore the input: how often each class comes in the labels, the
regression targets' mean.

A classifier that learns nothing from its inputs still learns how often each class comes; its
cross-entropy then sits at the entropy of the labels' class frequencies, which is log(C) only
where the classes are balanced (``loss-at-chance`` compares with log(C) otherwise). The targets
of each training cross-entropy (gradients on, class indices, no class weights: weights meant to
balance the classes make the weighted frequencies near uniform, log(C) again) are counted on
their device, with no host sync, until ``ENOUGH`` have been. Their entropy is read once, at the
run's end, and used only where it is known to within ``PRECISION`` (a few hundred labels of a
90/10 split are not: its entropy is then known to ~17%).

A regression that learns nothing from its inputs learns its targets' mean, and its mean squared
error sits at their variance about it (``TargetMoments``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

ENOUGH = 200_000
"""Targets counted over C classes, after which that count stops (a language model's batch
holds ~16,000; a classifier's 32 a step cost ~12 us a call to count here, the cross-entropy
itself ~7 us)."""
PRECISION = 0.01
"""The entropy's standard error, as a share of it, for it to stand in for log(C)."""
IMBALANCED = 0.97
"""The labels' entropy against log(C) below which it is used: above, log(C) stands."""
BATCH_CLASSES = 256
"""At most this many classes, a sampled step's own counts are kept (on its device, until the
run's end) for that batch's chance level; above, the labels' entropy stands for every batch's
(a language model's batch of thousands of tokens strays little from it)."""


def _counts(
    target: Any, classes: int, ignore_index: Any, into: torch.Tensor | None = None
) -> torch.Tensor | None:
    """[C + 1] counts of the class indices ``target`` holds, on its device, no host sync (the
    last: ``ignore_index``), added to ``into`` where given (on that device); None for
    probabilities, and on CUDA under deterministic algorithms (whose ``scatter_add_`` may
    refuse)."""
    if classes < 2 or not isinstance(target, torch.Tensor):
        return None
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        return None
    if target.is_cuda and torch.are_deterministic_algorithms_enabled():
        return None
    with torch.no_grad():
        t = target.detach().reshape(-1).long()
        if isinstance(ignore_index, int):
            t = torch.where(t == ignore_index, classes, t)
        if into is None or into.device != t.device:
            into = torch.zeros(classes + 1, dtype=torch.long, device=t.device)
        return into.scatter_add_(0, t, torch.ones_like(t))


class LabelCounts:
    def __init__(self) -> None:
        self._counts: dict[int, torch.Tensor] = {}  # C -> [C + 1] counts; the last: ignored
        self._given: dict[int, int] = {}  # C -> targets given (ignored ones too)
        self._smoothing: dict[int, float] = {}  # C -> the last label smoothing seen

    def add(self, target: Any, classes: int, ignore_index: Any, smoothing: Any) -> None:
        """Count the class indices of a training cross-entropy over ``classes``."""
        given = self._given.get(classes, 0)
        if given >= ENOUGH:
            return
        counts = _counts(target, classes, ignore_index, self._counts.get(classes))
        if counts is None:
            return
        self._counts[classes] = counts
        self._given[classes] = given + target.numel()
        self._smoothing[classes] = float(smoothing) if isinstance(smoothing, (int, float)) else 0.0

    def batch(self, target: Any, classes: int, ignore_index: Any) -> torch.Tensor | None:
        """A sampled step's counts, kept for ``chance`` (up to ``BATCH_CLASSES`` classes)."""
        return _counts(target, classes, ignore_index) if classes <= BATCH_CLASSES else None

    def levels(
        self, samples: Iterable[tuple[int, int, Any]], batches: dict[int, torch.Tensor]
    ) -> dict[int, float]:
        """Each sampled step's ``chance`` (``samples``: step, C, ...; ``batches``: the steps'
        own counts, ``batch``), the frequencies read once for each C; steps at log(C) are left
        out."""
        frequencies = {c: self._frequencies(c) for c in {c for _, c, *_ in samples}}
        levels = {}
        for s, c, *_ in samples:
            read = frequencies[c]
            level = None if read is None else self._level(c, read, batches.get(s))
            if level is not None:
                levels[s] = level
        return levels

    def chance(self, classes: int, batch: torch.Tensor | None = None) -> float | None:
        """The cross-entropy over ``classes`` of predictions that give each class as often as
        the labels do, on the batch whose ``batch`` counts these are (without them: on the
        labels as a whole, their entropy); None where log(C) stands (``_frequencies``)."""
        frequencies = self._frequencies(classes)
        return None if frequencies is None else self._level(classes, frequencies, batch)

    def _level(
        self, classes: int, frequencies: tuple[torch.Tensor, float], batch: torch.Tensor | None
    ) -> float | None:
        q, h = frequencies
        if batch is None:
            return h
        n = batch[:classes].double().cpu()
        if float(n.sum()) == 0:
            return None
        smoothing = self._smoothing.get(classes, 0.0)
        target = n / n.sum() * (1 - smoothing) + smoothing / classes
        return float(-(target * q.clamp_min(1e-12).log()).sum())

    def _frequencies(self, classes: int) -> tuple[torch.Tensor, float] | None:
        """The counted targets' class frequencies over ``classes``, as label smoothing leaves
        them, and their entropy (nats; Miller-Madow's correction for the classes unseen), where
        it is below ``IMBALANCED`` x log(C) and known to ``PRECISION``; None otherwise (one host
        sync)."""
        counts = self._counts.get(classes)
        if counts is None:
            return None
        seen = counts[:classes].double().cpu()
        n = float(seen.sum())
        if n < 2:
            return None
        smoothing = self._smoothing.get(classes, 0.0)
        q = seen / n * (1 - smoothing) + smoothing / classes
        present = q[q > 0]
        h = float(-(present * present.log()).sum())
        spread = max(0.0, float((present * present.log() ** 2).sum()) - h * h)  # var of -log q
        if smoothing == 0:
            h += (len(present) - 1) / (2 * n)  # the plug-in entropy is low by about this much
        if h <= 0 or math.sqrt(spread / n) > PRECISION * h or h >= IMBALANCED * math.log(classes):
            return None
        return q, h


ROWS = 2_000
"""Rows of regression targets whose mean is taken, after which that count stops (a tiny
model's step of 8 rows paid ~30 us a call while it counted): an error d in the mean adds only
d^2 to the level read with it (here ~1/2,000 of their variance), and raises it, so a level
read with a mean that is off (data sorted, targets that drift) finds less, never more."""
FEATURES = 256
"""Target positions (all but the first, the batch's, dimension) up to which each has its own
mean (a regression onto K outputs learns each one's); above, all are one. A sampled step keeps
two sums per position until the run's end."""


def _key(target: Any) -> tuple[int, ...] | None:
    """The shape a regression target's rows are read in: its shape past the rows (``()``: one
    value a row, or all positions as one above ``FEATURES``); None for no real rows."""
    if not isinstance(target, torch.Tensor) or target.dim() == 0 or not target.is_floating_point():
        return None
    if target.shape[0] < 2 or target.numel() == 0:
        return None
    shape = tuple(target.shape[1:])
    return shape if math.prod(shape) <= FEATURES else (-1,)


def _rows(target: torch.Tensor, key: tuple[int, ...]) -> int:
    """The rows ``_sums`` adds up: the target's first dimension, or every value for ``(-1,)``."""
    return target.numel() if key == (-1,) else target.shape[0]


def _sums(target: torch.Tensor, key: tuple[int, ...]) -> torch.Tensor:
    """[2, F] the sums over the rows of each position's value and square (float64, on the
    target's device; F: 1 for key ``(-1,)``, every value one position)."""
    with torch.no_grad():
        t = target.detach()
        t = t.reshape(-1, 1) if key in ((), (-1,)) else t.flatten(1)
        return torch.stack((t.sum(0, dtype=torch.float64), t.square().sum(0, dtype=torch.float64)))


class TargetMoments:
    """The targets of the training ``mse_loss`` calls: their mean, the prediction of a model
    that learns nothing from its inputs, whose mean squared error is then the targets' variance
    about it. Summed on their device, no host sync, by the shape of a row, until ``ROWS``."""

    def __init__(self) -> None:
        self._sums: dict[tuple[int, ...], torch.Tensor] = {}  # key -> [2, F]: sum, sum of squares
        self._rows: dict[tuple[int, ...], int] = {}
        # ``ROWS`` counted for a key: the calls stop being looked at (another key's mean is
        # read from the rows it had: a mean that is off finds less, never more)
        self.enough = False

    def add(self, target: Any) -> None:
        """Sum the rows of a training ``mse_loss``'s target (its input's shape)."""
        key = _key(target)
        if key is None or self._rows.get(key, 0) >= ROWS:
            return
        sums = _sums(target, key)
        last = self._sums.get(key)
        self._sums[key] = sums if last is None or last.device != sums.device else last + sums
        self._rows[key] = self._rows.get(key, 0) + _rows(target, key)
        self.enough = self._rows[key] >= ROWS

    def batch(self, target: Any) -> tuple[tuple[int, ...], int, torch.Tensor] | None:
        """A sampled step's target, kept for ``levels``: its key, rows and ``_sums``."""
        key = _key(target)
        if key is None:
            return None
        return key, _rows(target, key), _sums(target, key)

    def levels(
        self, batches: dict[int, tuple[tuple[int, ...], int, torch.Tensor]]
    ) -> dict[int, float]:
        """The mean squared error of predicting the targets' mean on each sampled step's batch
        (``batches``: by step, their ``batch``), where that batch's targets vary about their own
        mean by at least half of it: not a target held at one value (a least-squares GAN's
        ones), nor a batch far from the rest. Read at the run's end (a host read a step)."""
        means = {
            key: (sums[0] / self._rows[key]).cpu()
            for key, sums in self._sums.items()
            if self._rows[key] >= 2
        }
        levels = {}
        for s, (key, rows, sums) in batches.items():
            if key not in means:
                continue
            mean, (total, squares) = means[key], sums.cpu()
            level = float((squares - 2 * mean * total + rows * mean * mean).mean()) / rows
            spread = float((squares - total * total / rows).mean()) / rows  # about its own mean
            if level > 0 and spread >= level / 2:
                levels[s] = level
        return levels

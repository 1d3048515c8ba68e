"""Class weights that follow each class's frequency (``class-weights-by-frequency``):
``nn.CrossEntropyLoss(weight=counts / counts.sum())`` where the inverse was meant, or
``nn.BCEWithLogitsLoss(pos_weight=positives / negatives)`` where ``negatives / positives``
was. The common class then weighs more and the rare one less than without weights at all: the
rare class's recall falls where weighting was meant to raise it.

On sampled steps each training ``cross_entropy`` or ``nll_loss`` given a ``weight`` of C
values over integer targets counts its targets by class (``ignore_index`` left out), and each
``binary_cross_entropy_with_logits`` given a ``pos_weight`` sums its targets' positives by
column, on the device. After ``CALLS`` such calls with ``TARGETS`` targets or more, one host
read judges them, once:

- weights: over the classes that came ``LEAST`` times or more and weigh more than 0 (a class
  weighted 0 is left out on purpose: padding), the most common ``IMBALANCE`` times the rarest
  or more, the weights ``SPREAD`` apart or more, and proportional to the frequencies: a
  least-squares slope of log(weight) on log(frequency) within ``PROPORTIONAL`` (1 where they
  are the counts; -1 their inverse). Weights chosen for a cost, a prior shift or a sampling
  rate follow the counts too, but not in proportion: a costly common class weighted 5, 2, 1 at
  72/21/7%, slope 0.71; a deployment prior over the training prior, 1.59; negatives kept at
  a tenth and weighted 10, 1.51;
- ``pos_weight``: on half the columns whose positives stand ``IMBALANCE`` to 1 from their
  negatives (either way) or more, and one at least, a ``pos_weight`` within ``NEAR`` of
  positives / negatives: the reciprocal of the balancing one.

The finding waits for the run's end, where the weights are read again: weights a schedule
moves (from the counts toward their inverse over the epochs, head classes first on purpose)
are not the ones judged by then.

``class-balanced-twice``: weights inverse to the classes' frequency in the data, over batches a
sampler or oversampling has balanced already (the rare classes then count the imbalance's
square over the common ones, and are over-predicted). Where the weights are not proportional to
the batches' counts, the data's labels are read once (``label_counts.py``: the dataset the
latest training batch was drawn from, each example once), with the same counts and weights:
over the classes counted ``LEAST`` times or more, the data's commonest ``IMBALANCE`` times its
rarest or more, the weights ``SPREAD`` apart or more, the batches' counts flatter than the
data's (a slope of log(drawn frequency) on log(frequency in the data) of ``FLATTER`` or less)
and the weights inverse to the data's (a slope within ``INVERSE``). ``pos_weight``: within
``NEAR`` of the data's negatives / positives, with positives drawn near as often as negatives,
on half the imbalanced columns. Weights over natural batches, a balanced sampler alone, costs
on balanced batches, and weights that undo a sampling rate (negatives kept at a tenth and
weighted 10: the batches are then less balanced than the data, not more) are not it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health.findings import Finding

CALLS = 5
"""Sampled weighted losses counted before they are judged."""
TARGETS = 500
"""Targets counted (rows of a binary one's) before they are judged: a class of a tenth of them
is then counted about 50 times, its frequency read within about 15% (after 5 batches of 64,
320 targets, weights proportional to the counts were read at a slope of 0.85)."""
LEAST = 5
"""Targets a class needs for its frequency to be judged."""
IMBALANCE = 2.0
"""The most common class's count over the rarest's (or positives against negatives)."""
SPREAD = 1.5
"""The highest weight over the lowest."""
PROPORTIONAL = (0.8, 1.25)
"""Of log(weight) on log(frequency): the slopes read as weights proportional to the counts."""
NEAR = 1.5
"""How far ``pos_weight`` may be from positives / negatives, either way."""
FLATTER = 0.5
"""Of log(drawn frequency) on log(frequency in the data) (1 drawn as the data holds them; 0
balanced): at most this, the batches are balanced by the pipeline (``class-balanced-twice``).
For ``pos_weight``: the log-odds drawn within this share of the data's (a multi-label sampler
that draws rows by their rarest label balances each label in part)."""
INVERSE = (-1.3, -0.85)
"""Of log(weight) on log(frequency in the data): the slopes read as inverse frequencies."""


class ClassWeights:
    """``add``: where the finding goes. ``weighted`` and ``pos_weighted`` are told of each
    sampled training loss with its weights."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.done = False
        self.calls = 0
        self.counts: torch.Tensor | None = None  # [C] targets a class (or [L] positives)
        self.rows = 0  # targets counted (rows, for positives)
        self.weight: torch.Tensor | None = None  # the latest weights, [C] (or [L] / [1])
        self.binary = False  # pos_weight, not weight
        self.where = ""
        self.pending: tuple[Finding, list[float]] | None = None  # said at the run's end
        # the labels of the data the latest training batch was drawn from, each example once
        # (``Loaders.trained_labels``), for ``class-balanced-twice``
        self.natural: Callable[[], torch.Tensor | None] = lambda: None

    def weighted(self, weight: Any, target: Any, ignore: Any, classes: int, where: str) -> None:
        """A cross-entropy over ``classes`` classes given class ``weight`` and ``target``."""
        integer = isinstance(target, torch.Tensor) and not target.is_floating_point()
        if not integer or not _vector(weight, classes) or classes < 2:
            return
        flat = target.detach().reshape(-1)
        valid = (flat != ignore) & (flat >= 0) & (flat < classes)
        counts = torch.bincount(flat.clamp(0, classes - 1), valid.to(torch.float32), classes)
        self._note(counts, flat.numel(), weight, False, where)

    def pos_weighted(self, pos_weight: Any, target: Any, where: str) -> None:
        """A binary cross-entropy of logits given ``pos_weight`` and ``target`` (in [0, 1])."""
        if not isinstance(target, torch.Tensor) or not target.is_floating_point():
            return
        if isinstance(pos_weight, torch.Tensor) and pos_weight.dim() == 2:
            pos_weight = pos_weight[0] if pos_weight.shape[0] == 1 else pos_weight
        if not isinstance(pos_weight, torch.Tensor) or pos_weight.dim() > 1 or target.dim() < 1:
            return
        columns = target.detach().reshape(-1, target.shape[-1]) if target.dim() > 1 else None
        if columns is None or pos_weight.numel() != columns.shape[1]:
            columns = target.detach().reshape(-1, 1)
            if pos_weight.numel() != 1:
                return
        self._note(columns.float().sum(0), columns.shape[0], pos_weight, True, where)

    def seen(self, weight: torch.Tensor) -> None:
        """The latest weights given once judged, read again at the run's end."""
        self.weight = weight.detach()

    def _note(
        self, counts: torch.Tensor, rows: int, weight: torch.Tensor, binary: bool, where: str
    ) -> None:
        same = self.counts is not None and self.counts.shape == counts.shape
        if not same or self.binary != binary:
            self.counts, self.rows, self.calls = counts, 0, 0
        else:
            self.counts = self.counts + counts  # type: ignore[operator]
        self.rows += rows
        self.calls += 1
        self.weight, self.binary, self.where = weight.detach(), binary, where
        if self.calls >= CALLS and self.rows >= TARGETS:
            self.done = True
            self._judge()

    def _judge(self) -> None:
        assert self.counts is not None and self.weight is not None
        counts = self.counts.double().cpu().tolist()  # one host read each
        weights = self.weight.double().reshape(-1).cpu().tolist()
        found = (
            _inverted_pos_weight(counts, self.rows, weights)
            if self.binary
            else _proportional_weights(counts, weights)
        )
        if found is None:
            found = self._twice(counts, weights)
        if found is not None:
            found.where = self.where
            self.pending = (found, weights)

    def _twice(self, counts: list[float], weights: list[float]) -> Finding | None:
        """``class-balanced-twice``: the batches' classes against the data's (one host read
        of its labels, once)."""
        labels = self.natural()
        if labels is None:
            return None
        if self.binary:
            columns = labels.reshape(len(labels), -1)
            if columns.shape[1] != len(counts) or not bool(((columns == 0) | (columns == 1)).all()):
                return None
            natural = columns.double().sum(0).cpu().tolist()
            return balanced_twice_binary(counts, self.rows, natural, len(labels), weights)
        if labels.is_floating_point():
            return None
        kept = labels[(labels >= 0) & (labels < len(counts))]
        natural = torch.bincount(kept, minlength=len(counts)).double().cpu().tolist()
        return balanced_twice(counts, natural, weights)

    def take_run_end(self) -> Finding | None:
        """The finding, where the latest weights are still those judged (one host read)."""
        if self.pending is None or self.weight is None:
            return None
        found, judged = self.pending
        self.pending = None
        return found if self.weight.double().reshape(-1).cpu().tolist() == judged else None


def _vector(weight: Any, classes: int) -> bool:
    return isinstance(weight, torch.Tensor) and weight.shape == (classes,)


def _proportional_weights(counts: list[float], weights: list[float]) -> Finding | None:
    """``class-weights-by-frequency`` where ``weights`` are proportional to the classes'
    ``counts``."""
    if not all(math.isfinite(w) for w in weights):
        return None
    kept = [(c, w) for c, w in zip(counts, weights, strict=True) if c >= LEAST and w > 0]
    if len(kept) < 2:
        return None
    total = sum(c for c, _ in kept)
    rarest, commonest = min(kept), max(kept)
    low, high = min(w for _, w in kept), max(w for _, w in kept)
    if commonest[0] < IMBALANCE * rarest[0] or high < SPREAD * low:
        return None
    slope = _slope([math.log(c / total) for c, _ in kept], [math.log(w) for _, w in kept])
    if not PROPORTIONAL[0] <= slope <= PROPORTIONAL[1]:
        return None
    share = commonest[0] / total
    return Finding(
        "class-weights-by-frequency",
        "warning",
        f"the cross-entropy's class weights are proportional to the classes' frequency in its "
        f"targets (slope {slope:.2f} on a log-log scale): the most common class ({share:.0%} "
        f"of the targets) weighs {commonest[1]:.3g}, the rarest ({rarest[0] / total:.1%}) "
        f"{rarest[1]:.3g}, so the rare classes count less than without weights, not more "
        "(counts where their inverse was meant?)",
        evidence={
            "slope": round(slope, 3),
            "frequencies": [round(c / sum(counts), 4) for c in counts][:50],
            "weights": [round(w, 4) for w in weights][:50],
        },
    )


def _inverted_pos_weight(counts: list[float], rows: int, weights: list[float]) -> Finding | None:
    """``class-weights-by-frequency`` where ``pos_weight`` is positives over negatives by
    column (``counts``: positives of ``rows``), on half the imbalanced columns or more."""
    weights = weights * len(counts) if len(weights) == 1 else weights
    imbalanced, inverted = 0, []
    for i, (positives, w) in enumerate(zip(counts, weights, strict=True)):
        negatives = rows - positives
        if positives <= 0 or negatives <= 0 or w <= 0 or not math.isfinite(w):
            continue
        ratio = positives / negatives
        if abs(math.log(ratio)) < math.log(IMBALANCE):
            continue
        imbalanced += 1
        if abs(math.log(w / ratio)) <= math.log(NEAR):
            inverted.append((i, ratio, w))
    if not inverted or 2 * len(inverted) < imbalanced:
        return None
    _, ratio, w = inverted[0]
    columns = f"{len(inverted)} of {len(counts)} columns" if len(counts) > 1 else "its targets"
    return Finding(
        "class-weights-by-frequency",
        "warning",
        f"the binary cross-entropy's pos_weight is near positives / negatives on {columns} "
        f"({w:.3g} where positives stand {ratio:.3g} to 1 against negatives): the reciprocal "
        f"of the balancing weight, so the {'rare positives' if ratio < 1 else 'rare negatives'} "
        "count less than without it, not more (negatives / positives was meant?)",
        evidence={
            "columns": [i for i, _, _ in inverted][:20],
            "positives_per_negative": round(ratio, 4),
            "pos_weight": round(w, 4),
        },
    )


def balanced_twice(
    counts: list[float], natural: list[float], weights: list[float]
) -> Finding | None:
    """``class-balanced-twice`` where the batches' class ``counts`` are far flatter than the
    data's (``natural``) and the class ``weights`` are inverse to the data's."""
    kept = [
        (c, n, w)
        for c, n, w in zip(counts, natural, weights, strict=True)
        if c >= LEAST and n > 0 and 0 < w < math.inf
    ]
    if len(kept) < 2:
        return None
    data = [math.log(n) for _, n, _ in kept]
    if max(data) - min(data) < math.log(IMBALANCE) or not _apart([w for *_, w in kept]):
        return None
    drawn = _slope(data, [math.log(c) for c, _, _ in kept])  # 1: as the data; 0: balanced
    weighed = _slope(data, [math.log(w) for *_, w in kept])  # -1: inverse to the data
    if drawn > FLATTER or not INVERSE[0] <= weighed <= INVERSE[1]:
        return None
    total, drawn_total = sum(n for _, n, _ in kept), sum(c for c, _, _ in kept)
    rare = min(kept, key=lambda k: k[1])
    common = max(kept, key=lambda k: k[1])
    return Finding(
        "class-balanced-twice",
        "warning",
        f"the cross-entropy's class weights are inverse to the classes' frequency in the data "
        f"(slope {weighed:.2f} on a log-log scale), but its batches are balanced already: the "
        f"rarest class is {rare[1] / total:.1%} of the data and {rare[0] / drawn_total:.0%} of "
        f"the targets drawn, the commonest {common[1] / total:.0%} and "
        f"{common[0] / drawn_total:.0%} (a sampler or oversampling). Weighted again "
        f"({rare[2]:.3g} against {common[2]:.3g}), the rare classes count "
        f"{rare[2] / common[2]:.3g}x as much as the common ones on balanced batches, and the "
        "model over-predicts them",
        evidence={
            "weights_slope": round(weighed, 3),
            "drawn_slope": round(drawn, 3),
            "data_frequencies": [round(n / sum(natural), 4) for n in natural][:50],
            "drawn_frequencies": [round(c / max(sum(counts), 1), 4) for c in counts][:50],
            "weights": [round(w, 4) for w in weights][:50],
        },
    )


def balanced_twice_binary(
    counts: list[float], rows: int, natural: list[float], examples: int, weights: list[float]
) -> Finding | None:
    """``class-balanced-twice`` for ``pos_weight``: on half the columns whose positives stand
    ``IMBALANCE`` to 1 from their negatives in the data (either way) or more, and one at least,
    positives drawn near as often as negatives and a ``pos_weight`` within ``NEAR`` of the
    data's negatives / positives."""
    weights = weights * len(counts) if len(weights) == 1 else weights
    imbalanced, twice = 0, []
    for i, (drawn, held, w) in enumerate(zip(counts, natural, weights, strict=True)):
        if not 0 < held < examples or not 0 < drawn < rows or not 0 < w < math.inf:
            continue
        ratio = held / (examples - held)
        if abs(math.log(ratio)) < math.log(IMBALANCE):
            continue
        imbalanced += 1
        ratio_drawn = drawn / (rows - drawn)
        flatter = abs(math.log(ratio_drawn)) <= FLATTER * abs(math.log(ratio))
        if flatter and abs(math.log(w * ratio)) <= math.log(NEAR):
            twice.append((i, ratio, ratio_drawn, w))
    if not twice or 2 * len(twice) < imbalanced:
        return None
    _, ratio, ratio_drawn, w = twice[0]
    columns = f"{len(twice)} of {len(counts)} columns" if len(counts) > 1 else "its targets"
    return Finding(
        "class-balanced-twice",
        "warning",
        f"the binary cross-entropy's pos_weight is near negatives / positives of the data on "
        f"{columns} ({w:.3g} where positives stand {ratio:.3g} to 1 against negatives in the "
        f"data), but its batches are balanced already ({ratio_drawn:.3g} to 1 drawn: a sampler "
        f"or oversampling). Weighted again, a batch's positives together weigh about "
        f"{w * ratio_drawn:.3g}x its negatives, and the model over-predicts them",
        evidence={
            "columns": [i for i, *_ in twice][:20],
            "positives_per_negative": round(ratio, 4),
            "drawn_positives_per_negative": round(ratio_drawn, 4),
            "pos_weight": round(w, 4),
        },
    )


def _apart(weights: list[float]) -> bool:
    return max(weights) >= SPREAD * min(weights)


def _slope(x: list[float], y: list[float]) -> float:
    """The least-squares slope of ``y`` on ``x`` (``x`` not all one value)."""
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sum(
        (a - mx) ** 2 for a in x
    )

"""``targets-not-scaled``: a regression trained on targets in their raw units (house prices in
dollars, counts in the hundreds, temperatures in kelvin, log prices of 12.7 +- 0.4) by a model
whose output starts near 0, as a freshly initialised last ``Linear`` layer's does. The first
steps only move the outputs towards the targets' mean, by about the learning rate a step under
Adam (whose update does not grow with the error), or by a huge gradient under SGD; the weights
grow to get there, and the fit of what varies about the mean comes late and worse. Standardised
targets (``(y - mean) / std``, from the training set, mapped back for evaluation) start the
model at their scale.

On sampled steps ``mse_loss``, ``l1_loss``, ``smooth_l1_loss`` and ``huber_loss`` with
gradients (the nn losses call them), their prediction and target of one shape, are read at each
line (one host read a call: the prediction's mean and root mean square, the target's mean,
standard deviation and root mean square, their mean squared difference). A line whose first
read has targets that vary, of root mean square ``SCALE`` or more (or ``NEAR`` or more with a
mean ``OFFSET`` standard deviations from 0 or more), and ``START`` times the prediction's root mean square or more, is
kept. At the run's end, after ``READS`` reads or more, it is the finding where the cost shows
in the share of the targets' variance the predictions left unexplained: still ``WORSE`` or
more over the last tenth of the reads (worse than predicting their mean: the scale never
reached), or ``EARLY`` or more a quarter into the run and ``FALLEN`` times the end's (the start
went into reaching the scale, the fit came late). A model at its noise floor by a quarter of
the run (noisy labels, a value function's returns) reads about the same at both and is not
named. A model set up for the scale (its last bias at the targets' mean, an output multiplied
up, a sigmoid times 255) starts near it and is not kept; one that reaches it early and fits
well (Adam at 1e-2, a bias set after the first step) is not named.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from treeqa.health import sites
from treeqa.health.findings import Finding

SCALE = 10.0
"""Root mean square of the targets at or above which they are on a scale of their own (a
standardised target's is about 1, a rating's up to 5)."""
OFFSET = 5.0
"""Standard deviations the targets' mean is from 0 at or above which they are off the output's
scale at a root mean square of ``NEAR`` or more (a pH of 8 +- 0.3)."""
NEAR = 5.0
"""Root mean square below which targets far from 0 in their own spread are still near the
outputs: a clean set regression of 2 +- 0.2 reached its mean in 30 steps."""
START = 20.0
"""How many times the prediction's root mean square the targets' must be at a line's first
read: a model set up for their scale starts near it."""
READS = 5
"""Reads at a line before it is judged."""
EARLY = 0.15
"""Share of the targets' variance left unexplained a quarter into the run at or above which
the start may have gone into reaching their scale..."""
FALLEN = 1.5
"""...where that share is this many times the one at the run's end or more: the fit came
late (a model at its noise floor by then reads about the same at both)."""
WORSE = 1.0
"""Share at the run's end at or above which the predictions are worse than the targets' mean
(never reached their scale)."""


class Read(NamedTuple):
    """One call's: the prediction's mean, the target's mean, standard deviation and root mean
    square, the mean squared difference."""

    predicted: float
    mean: float
    spread: float
    rms: float
    error: float


class Line(NamedTuple):
    """A kept line: its loss function, the first read's prediction root mean square, its
    reads."""

    function: str
    started: float
    reads: list[Read]


class TargetScales:
    """``note`` is given each regression loss on a sampled step; ``finish`` at the run's end."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.lines: dict[str, Line | None] = {}  # line -> kept (None: on scale at its first)

    def note(self, fname: str, input: torch.Tensor, target: Any, kwargs: dict[str, Any]) -> None:
        """``F.<fname>(input, target, **kwargs)`` with gradients, on a sampled step."""
        if kwargs.get("reduction", "mean") == "none" or input.grad_fn is None:
            return
        if not isinstance(target, torch.Tensor) or target.shape != input.shape:
            return
        if target.numel() < 2 or not target.is_floating_point() or target.requires_grad:
            return
        where = sites.user_site(2)
        seen = where in self.lines
        line = self.lines.get(where)
        if seen and line is None:
            return
        read, started = _read(input.detach(), target.detach())
        if read is None:
            return
        if line is not None:
            line.reads.append(read)
        elif _off_scale(read) and read.rms >= START * started:
            self.lines[where] = Line(fname, started, [read])
        else:
            self.lines[where] = None

    def finish(self) -> None:
        """The run ended: each kept line where the scale cost the fit."""
        for where, line in self.lines.items():
            if line is None or len(line.reads) < READS:
                continue
            reads, span = line.reads, max(3, len(line.reads) // 10)
            quarter = _unexplained(reads[len(reads) // 4 :][:span])
            last = _unexplained(reads[-span:])
            if last >= WORSE or (quarter >= EARLY and quarter >= FALLEN * last):
                reached = next(
                    (i for i, r in enumerate(reads) if abs(r.predicted - r.mean) <= r.spread),
                    None,
                )
                self.add(_finding(where, line, reached, quarter, last))


def _off_scale(read: Read) -> bool:
    """Targets on a scale of their own: large, or far from 0 in their own spread and ``NEAR``
    or more (targets held at one value, a least-squares GAN's ones, soft labels of 0.9 +- 0.05,
    a set's statistic of 2 +- 0.2 that a model reaches in a few dozen steps, are not)."""
    if read.spread <= 0:
        return False
    return read.rms >= SCALE or (read.rms >= NEAR and abs(read.mean) >= OFFSET * read.spread)


def _unexplained(reads: list[Read]) -> float:
    """The median share of the targets' variance the reads' predictions left unexplained
    (their mean squared error over the variance: above 1 while they are off the mean)."""
    return statistics.median(r.error / max(r.spread**2, 1e-12) for r in reads)


def _read(prediction: torch.Tensor, target: torch.Tensor) -> tuple[Read | None, float]:
    """(the call's ``Read``, the prediction's root mean square): one host read; None for
    values that are not finite."""
    p, t = prediction.float(), target.float()
    with torch.no_grad():
        values = torch.stack(
            [
                p.mean(),
                t.mean(),
                t.std(),
                t.square().mean().sqrt(),
                (p - t).square().mean(),
                p.square().mean().sqrt(),
            ]
        ).tolist()
    if not all(math.isfinite(v) for v in values):
        return None, 0.0
    return Read(*values[:5]), values[5]


def _finding(where: str, line: Line, reached: int | None, quarter: float, last: float) -> Finding:
    first, reads = line.reads[0], line.reads
    when = (
        "never came within one standard deviation of the targets' mean"
        if reached is None
        else "came within one standard deviation of the targets' mean only at the "
        f"{_ordinal(reached + 1)} of its {len(reads)} sampled calls"
    )
    return Finding(
        "targets-not-scaled",
        "warning",
        f"{line.function}'s targets are on a scale of their own (mean {first.mean:.4g}, "
        f"standard deviation {first.spread:.4g}, root mean square {first.rms:.4g}) while the "
        f"model's outputs started at a root mean square of {line.started:.3g}: the outputs' "
        f"mean {when}; a quarter into the run {_left(quarter)}, and at its end {_left(last)} "
        "(the steps went into reaching their scale, and the weights grew to get there)",
        where=where,
        evidence={
            "function": line.function,
            "target_mean": round(first.mean, 6),
            "target_std": round(first.spread, 6),
            "target_rms": round(first.rms, 6),
            "output_rms_at_start": round(line.started, 6),
            "reached_mean_at_read": reached,
            "reads": len(reads),
            "unexplained_at_quarter": round(quarter, 4),
            "unexplained_at_end": round(last, 4),
        },
    )


def _left(unexplained: float) -> str:
    if unexplained >= 1:
        return f"the squared error was {unexplained:,.3g} times the targets' variance"
    return f"{unexplained:.0%} of their variance was left unexplained"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"

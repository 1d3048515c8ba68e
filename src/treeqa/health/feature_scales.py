"""``features-not-scaled``: tabular features given to a network's first ``Linear`` layer in their
raw units: square feet and lot sizes, incomes in dollars, pressures in pascals, a Unix time in
seconds, beside 0/1 flags. A fresh layer's weights are about ``1 / sqrt(in_features)``, so its
outputs start hundreds or millions of times too large: ReLUs die or tanh units saturate at
once, SGD diverges (a loan classifier's loss reached 8e7 in its first epoch, then sat at log 2
with every ReLU dead), Adam moves the large columns' weights by the same step as the small
ones', and a signal in a column of small spread (a wine's density, 0.997 +- 0.001) is drowned.
Standardised with the training set's mean and standard deviation, the same networks fit.

On sampled training steps each ``nn.Linear``, ``nn.Conv1d`` (its channels the columns) and
recurrent layer with weights to train, given a floating tensor that needs no gradient (the data
itself: a norm layer first, ``BatchNorm1d`` or ``LayerNorm``, gives its output with one; a
reentrant checkpoint's block, recomputed in the backward from detached inputs, is given leaves
that need one; statistics kept as buffers and applied in the forward give small values; a
frozen layer that standardises is passed by), has its input columns' root mean squares, means and standard deviations read on the
device (the first ``LAYERS`` such layers of a step; one host read at its end). A column of
``LARGE`` or more, or a narrow band ``OFFSET`` standard deviations from 0 or more, counts;
``STEPS`` sampled steps in a row make the finding, at the layer. A model trained by ``LBFGS``
(a linear regression solved in a few dozen line searches, which the features' scale does not
slow) is not judged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from treeqa.health.findings import Finding

LARGE = 20.0
"""Root mean square of a column at or above which it is in raw units (a standardised column's
is about 1; a rating's up to 5, a count's log up to ~10, robustly scaled features with
outliers 6.7, up to 11 in a batch). Ages, a BMI of 27 +- 4, temperatures in Celsius, fed raw to
an MLP trained by SGD, gave 6x the MSE of their standardised copy."""
OFFSET = 50.0
"""A column whose mean is this many of its standard deviations from 0 or more is a narrow band
far from 0, however small (each column divided by its maximum: a pressure of 0.97 +- 0.008, a
year of 0.97 +- 0.01; a wine's density of 0.997 +- 0.001; the log of a year): its signal is
drowned in its offset."""
TIGHTEST = 1e-4
"""A spread below this share of the mean is a constant in float rounding, not a signal."""
STEPS = 3
"""Sampled steps in a row with a column that large."""
LAYERS = 16
"""Layers read in a step, at most (a per-feature tokeniser gives each column its own)."""
SHOWN = 3
"""Columns named in the message."""
READ = (nn.Linear, nn.Conv1d, nn.RNNBase)
"""Layers that read features: by the last dim, or a ``Conv1d`` by its channels."""


class FeatureScales:
    """``note`` is given each module's forward on a sampled step; ``judge`` at its end."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        # (layer, [3, columns]: each column's root mean square, mean, standard deviation)
        self.reads: list[tuple[str, torch.Tensor]] = []
        self.steps = 0  # sampled steps in a row with a column in raw units
        self.reported = False
        self.lbfgs = False  # the run's optimiser is LBFGS (set by the doctor)

    def note(self, name: str, module: nn.Module, inputs: Any) -> None:
        """``module`` (named ``name``) ran a forward on ``inputs`` in a sampled step."""
        if self.reported or self.lbfgs or len(self.reads) >= LAYERS:
            return
        if not isinstance(module, READ):
            return
        if not module.training or not torch.is_grad_enabled():
            return
        if not any(p.requires_grad for p in module.parameters()):
            return  # a frozen layer that standardises what it is given
        x = inputs[0] if isinstance(inputs, tuple) and inputs else None
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.requires_grad:
            return  # (a layer's output, or a leaf that wants a gradient: a reentrant
            # checkpoint recomputes a block from its detached inputs in the backward)
        if isinstance(module, nn.Conv1d) and x.dim() == 3:
            x = x.transpose(1, 2)  # [B, C, T] -> [B, T, C]: the channels are its columns
        if x.dim() < 2 or x.numel() // x.shape[-1] < 2:
            return
        with torch.no_grad():  # [rows, columns] -> [3, columns]
            rows = x.detach().reshape(-1, x.shape[-1]).float()
            std, mean = torch.std_mean(rows, dim=0)
            stats = torch.stack([rows.pow(2).mean(0).sqrt(), mean, std])
        self.reads.append((f"{name} ({type(module).__name__})", stats))

    def judge(self) -> None:
        """At the sampled step's end (one host read)."""
        reads, self.reads = self.reads, []
        if self.reported or self.lbfgs:
            return
        raw = _first_raw(reads) if reads else None
        self.steps = self.steps + 1 if raw is not None else 0
        if raw is not None and self.steps == STEPS:
            self.reported = True
            self.add(features_not_scaled(*raw, self.steps))


def _first_raw(
    reads: list[tuple[str, torch.Tensor]],
) -> tuple[str, list[float], list[float], list[float]] | None:
    """The first layer read with a column in raw units: (layer, its columns' root mean
    squares, means and standard deviations)."""
    values = torch.cat([stats for _, stats in reads], dim=1).tolist()
    at = 0
    for layer, stats in reads:
        columns = stats.shape[1]
        rms, mean, std = (v[at : at + columns] for v in values)
        at += columns
        if any(_raw(*column) for column in zip(rms, mean, std, strict=True)):
            return layer, rms, mean, std
    return None


def _raw(rms: float, mean: float, std: float) -> bool:
    """A column in raw units: large, or a narrow band far from 0."""
    return rms >= LARGE or _banded(mean, std)


def _banded(mean: float, std: float) -> bool:
    """A column that varies in a narrow band far from 0 (not a constant in float rounding)."""
    return std > TIGHTEST * abs(mean) and abs(mean) >= OFFSET * std


def features_not_scaled(
    layer: str, rms: list[float], mean: list[float], std: list[float], steps: int
) -> Finding:
    """``layer`` was given raw features (each column's root mean square, mean and standard
    deviation) on ``steps`` sampled steps in a row."""
    columns = len(rms)
    large = sorted((i for i in range(columns) if rms[i] >= LARGE), key=lambda i: -rms[i])
    banded = [i for i in range(columns) if rms[i] < LARGE and _banded(mean[i], std[i])]
    said = []
    if large:
        shown = ", ".join(f"{i}: {rms[i]:.3g}" for i in large[:SHOWN])
        said.append(
            f"{len(large)} of its {columns} input columns have a root mean square of {LARGE:g} "
            f"or more (column {shown}; the smallest of all {min(rms):.3g})"
        )
    if banded:
        shown = ", ".join(f"{i}: {mean[i]:.4g} +- {std[i]:.2g}" for i in banded[:SHOWN])
        said.append(
            f"{len(banded)} lie in a narrow band far from 0 (column {shown}), their signal "
            "drowned in their offset"
        )
    return Finding(
        "features-not-scaled",
        "warning",
        f"{layer} was given features in their raw units on {steps} sampled steps in a row: "
        + "; ".join(said)
        + "; a fresh layer's outputs start far too large or offset (dead ReLUs, saturated "
        "units, SGD diverging) and the small columns are drowned",
        where=layer,
        evidence={
            "columns": columns,
            "large_columns": len(large),
            "largest_rms": [round(rms[i], 4) for i in large[:SHOWN]],
            "banded_columns": len(banded),
            "smallest_rms": round(min(rms), 6),
            "steps": steps,
        },
    )

"""``features-not-scaled``: tabular features given to a network's first ``Linear`` layer in their
raw units: square feet and lot sizes, incomes in dollars, pressures in pascals, a Unix time in
seconds, beside 0/1 flags. A fresh layer's weights are about ``1 / sqrt(in_features)``, so its
outputs start hundreds or millions of times too large: ReLUs die or tanh units saturate at
once, SGD diverges (a loan classifier's loss reached 8e7 in its first epoch, then sat at log 2
with every ReLU dead), Adam moves the large columns' weights by the same step as the small
ones', and a signal in a column of small spread (a wine's density, 0.997 +- 0.001) is drowned.
Standardised with the training set's mean and standard deviation, the same networks fit.

On sampled training steps each ``nn.Linear`` given a floating tensor without a graph (the data
itself: a norm layer first, ``BatchNorm1d`` or ``LayerNorm``, gives its output with one;
statistics kept as buffers and applied in the forward give small values) has its columns'
root mean squares read (a host read a layer at the step's end, the first ``LAYERS`` such
layers of a step). A column of ``LARGE`` or more counts; ``STEPS`` sampled steps in a row make the finding,
at the layer. A model trained by ``LBFGS`` (a linear regression solved in a few dozen line
searches, which the features' scale does not slow) is not judged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from treeqa.health.findings import Finding

LARGE = 30.0
"""Root mean square of a column at or above which it is in raw units (a standardised column's
is about 1; a rating's up to 5, a count's log up to ~10)."""
STEPS = 3
"""Sampled steps in a row with a column that large."""
LAYERS = 4
"""Layers read in a step, at most."""
SHOWN = 3
"""Columns named in the message."""


class FeatureScales:
    """``note`` is given each module's forward on a sampled step; ``judge`` at its end."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.reads: list[tuple[str, int, torch.Tensor]] = []  # (layer, columns, their RMS)
        self.steps = 0  # sampled steps in a row with a large column
        self.reported = False
        self.lbfgs = False  # the run's optimiser is LBFGS (set by the doctor)

    def note(self, name: str, module: nn.Module, inputs: Any) -> None:
        """``module`` (named ``name``) ran a forward on ``inputs`` in a sampled step."""
        if self.reported or len(self.reads) >= LAYERS or not isinstance(module, nn.Linear):
            return
        if not module.training or not torch.is_grad_enabled():
            return
        x = inputs[0] if isinstance(inputs, tuple) and inputs else None
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.grad_fn is not None:
            return
        if x.dim() < 2 or x.shape[-1] < 2 or x.numel() // x.shape[-1] < 2:
            return
        with torch.no_grad():  # [rows, in_features] -> [in_features]
            rms = x.detach().reshape(-1, x.shape[-1]).float().pow(2).mean(0).sqrt()
        self.reads.append((f"{name} ({type(module).__name__})", int(x.shape[-1]), rms))

    def judge(self) -> None:
        """At the sampled step's end."""
        reads, self.reads = self.reads, []
        if self.reported or self.lbfgs:
            return
        large = None
        for layer, columns, rms in reads:
            values = rms.tolist()  # (one host read a layer, LAYERS at most)
            if max(values, default=0.0) >= LARGE:
                large = (layer, columns, values)
                break
        self.steps = self.steps + 1 if large is not None else 0
        if large is not None and self.steps == STEPS:
            self.reported = True
            self.add(features_not_scaled(*large, self.steps))


def features_not_scaled(layer: str, columns: int, rms: list[float], steps: int) -> Finding:
    """``layer`` was given raw features, root mean squares ``rms`` by column, on ``steps``
    sampled steps in a row."""
    order = sorted(range(columns), key=lambda i: -rms[i])
    large = [i for i in order if rms[i] >= LARGE]
    shown = ", ".join(f"{i}: {rms[i]:.3g}" for i in large[:SHOWN])
    return Finding(
        "features-not-scaled",
        "warning",
        f"{layer} was given features in their raw units on {steps} sampled steps in a row: "
        f"{len(large)} of its {columns} input columns have a root mean square of {LARGE:g} or "
        f"more (column {shown}), the smallest {min(rms):.3g}; a fresh layer's outputs start far "
        "too large (dead ReLUs, saturated units, SGD diverging) and the small columns are "
        "drowned",
        where=layer,
        evidence={
            "columns": columns,
            "large_columns": len(large),
            "largest_rms": [round(rms[i], 4) for i in order[:SHOWN]],
            "smallest_rms": round(min(rms), 6),
            "steps": steps,
        },
    )

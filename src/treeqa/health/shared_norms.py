"""One batch norm at two places of a model (``batch-norm-shared``): ``self.bn`` called after
``conv2`` and again after ``conv3``, one ``norm`` after every hidden layer, a list made as
``[nn.BatchNorm1d(h)] * n``. In training mode each call normalises by its own batch's
statistics, and training goes well; the running mean and variance, though, are one blend of
every place's, and in eval mode each place is normalised by that blend, not by its own
statistics: the model evaluated after ``model.eval()`` is not the one that trained.

On sampled steps each training-mode call of a batch norm that keeps running statistics has
its input's mean and variance by channel taken on the device. Where a forward of a watched
model calls one batch norm twice or more, the calls are compared with their blend, which the
running statistics come to (``_gap``); a gap of ``APART`` or more above the noise of the
calls' statistics counts the sampled step (one host read at its end), and ``STEPS`` sampled
steps in a row arm a forward pre-hook on the norm, which makes the finding at the norm's first
call in eval mode (a model that is never evaluated so loses nothing). One encoder applied to
two views of the same data (a Siamese pair, two crops) gives its norms inputs alike, and a
discriminator run on real and fake batches runs two forwards, not one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from treeqa.health import sites
from treeqa.health.findings import Finding

APART = 0.4
"""A call's distance from the blend of the calls (see ``_gap``) that counts, above the noise
of its statistics (``NOISE``): at 0.4 two places differing alike lost 5 points held out, at
0.2 two."""
NOISE = 2.0
"""The noise allowed the statistics of ``n`` values a channel: ``NOISE / sqrt(n)`` (8 rows a
call, ghost batch norm's, read 0.58 by noise alone; 32 rows, 0.29)."""
QUANTILE = 0.75
"""Of the channels' distances, the one read as the call's: a quarter of the channels far off
(5 of 16 columns in cents) is far off."""
STEPS = 3
"""Sampled steps in a row whose forwards called the norm at places so far apart."""
EPS = 1e-5
"""Added to each variance (as the norms do): a channel that is zero everywhere is no scale."""
CONSTANT = 1e-4
"""A call whose channels' median variance is below this share of the calls' median is of a
constant input (a recurrent state's zeros at the first step), and is left out."""


class SharedNorms:
    """``add``: where the finding goes. ``note`` is told of each module's forward on sampled
    steps; ``roots``: the watched models' ids, whose forward's end closes a forward's calls."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.roots: set[int] = set()
        self.said = False
        # this forward's norms, by id: (name, the norm, each call's [2, C] means and variances,
        # the fewest values a channel of its calls had)
        self.calls: dict[int, tuple[str, nn.Module, list[torch.Tensor], list[int]]] = {}
        # this step's norms called twice or more in a forward: (name, norm, calls, gap, the
        # gap that counts)
        self.read: list[tuple[str, nn.Module, int, torch.Tensor, float]] = []
        self.steps: dict[str, int] = {}  # sampled steps in a row apart, by norm
        self.armed: list[Any] = []  # the eval-mode pre-hooks' handles

    def note(self, name: str, module: nn.Module, inputs: Any) -> None:
        """``module`` (named ``name``) ran a forward on ``inputs`` in a sampled step (with
        gradients or not: a norm run under ``no_grad`` in training mode updates its statistics
        all the same)."""
        if id(module) in self.roots:
            self._close()
            return
        if self.said or not isinstance(module, _BatchNorm) or not module.training:
            return
        x = inputs[0] if isinstance(inputs, tuple) and inputs else None
        if not module.track_running_stats or not isinstance(x, torch.Tensor) or x.dim() < 2:
            return
        values = x.numel() // max(1, x.shape[1])  # a channel's (rows times positions)
        if values < 2:
            return
        x = x.detach().float().transpose(0, 1).reshape(x.shape[1], -1)  # [C, N * L]
        variance, mean = torch.var_mean(x, dim=1)
        held = self.calls.setdefault(id(module), (name, module, [], []))
        held[2].append(torch.stack([mean, variance]))
        held[3].append(values)

    def _close(self) -> None:
        """A watched model's forward ended: its norms called twice or more are compared."""
        for name, module, stats, values in self.calls.values():
            if len(stats) >= 2:
                counts = APART + NOISE / math.sqrt(min(values))
                self.read.append((name, module, len(stats), _gap(torch.stack(stats)), counts))
        self.calls = {}

    def judge(self) -> None:
        """At the sampled step's end (one host read)."""
        self._close()
        read, self.read = self.read, []
        if self.said:
            return
        gaps = torch.stack([r[3] for r in read]).tolist() if read else []
        apart: dict[str, tuple[nn.Module, int, float]] = {}
        for (name, module, calls, _, counts), gap in zip(read, gaps, strict=True):
            if gap >= counts and gap > apart.get(name, (module, 0, 0.0))[2]:
                apart[name] = (module, calls, gap)
        self.steps = {name: self.steps.get(name, 0) + 1 for name in apart}
        for name, (module, calls, gap) in apart.items():
            if self.steps[name] == STEPS:
                self._arm(name, module, calls, gap)

    def _arm(self, name: str, norm: nn.Module, calls: int, gap: float) -> None:
        """The norm ``name`` blends places apart: the finding at its first call in eval mode."""

        def evaluated(module: nn.Module, args: Any) -> None:
            if module.training or self.said:
                return
            self.said = True
            self.unhook()
            self.add(batch_norm_shared(name, type(module).__name__, calls, gap))

        self.armed.append(norm.register_forward_pre_hook(evaluated))

    def unhook(self) -> None:
        while self.armed:
            self.armed.pop().remove()


def _gap(stats: torch.Tensor) -> torch.Tensor:
    """``stats``: [calls, 2, C], each call's channels' means and variances. Calls of a constant
    input left out, each channel of each other call is off the blend of them (the running
    statistics) by its mean's distance from the blend's, in its own standard deviations, plus
    half the log of the blend's variance over its own; a call's distance is its channels'
    ``QUANTILE``, the gap the calls' median, the upper of two (a weight-tied iteration whose
    first steps differ and whose later ones converge is not far off)."""
    level = stats[:, 1].median(dim=1).values  # [calls]
    kept = stats[level >= CONSTANT * level.median()]  # (not the zeros of a first state)
    mean, variance = kept[:, 0], kept[:, 1] + EPS  # [calls, C]
    blend_mean, blend_variance = mean.mean(0), variance.mean(0)  # [C]
    shift = (mean - blend_mean).abs() / variance.sqrt()
    scale = 0.5 * (blend_variance / variance).log().abs()
    calls = (shift + scale).quantile(QUANTILE, dim=1).sort().values
    return calls[len(calls) // 2]  # (the upper of two: the place the blend is furthest from)


def batch_norm_shared(layer: str, kind: str, calls: int, gap: float) -> Finding:
    return Finding(
        "batch-norm-shared",
        "warning",
        f"{layer} ({kind}) is called at {calls} places of one forward, on inputs whose channels "
        f"differ (by {gap:.2f} standard deviations of shift and log-scale from their blend, "
        "at a quarter of the channels): in training each call is normalised by its own "
        "batch's statistics, but the running mean and variance blend every place's, and now, "
        "in eval mode, each place is normalised by that blend, not its own: the model "
        "evaluated is not the one that trained",
        where=f"{layer} ({kind}), evaluated at {sites.models_caller()}",
        evidence={"layer": layer, "calls": calls, "gap": round(gap, 3)},
    )

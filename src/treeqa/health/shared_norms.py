"""One batch norm at two places of a model (``batch-norm-shared``): ``self.bn`` called after
``conv2`` and again after ``conv3``, one ``norm`` after every hidden layer, a list made as
``[nn.BatchNorm1d(h)] * n``. In training mode each call normalises by its own batch's
statistics, and training goes well; the running mean and variance, though, are one blend of
every place's, and in eval mode each place is normalised by that blend, not by its own
statistics: the model evaluated after ``model.eval()`` is not the one that trained.

On sampled steps each training call of a batch norm that keeps running statistics (with
gradients, two rows or more) has its input's mean and variance by channel taken on the device.
Where a forward of a watched model calls one batch norm twice or more, each call's channels are
compared with the mean over the calls, which the running statistics come to: a channel's shift
(its mean's distance from the blend's, in its own standard deviations) plus the log of its
standard deviation over the blend's. The median over the channels of the call that is furthest
off, ``APART`` or more, counts the sampled step (one host read at its end); ``STEPS`` sampled
steps in a row arm a forward pre-hook on the norm, which makes the finding at the norm's first
call in eval mode (a model that is never evaluated so loses nothing). One encoder applied to
two views of the same data (a Siamese pair, two crops) gives its norms inputs alike, and a
discriminator run on real and fake batches runs two forwards, not one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from treeqa.health import sites
from treeqa.health.findings import Finding

APART = 0.5
"""Median over the channels of a call's shift plus log-scale from the blend of the calls."""
STEPS = 3
"""Sampled steps in a row whose forwards called the norm at places so far apart."""
EPS = 1e-5
"""Added to each variance (as the norms do): a channel that is zero everywhere is no scale."""


class SharedNorms:
    """``add``: where the finding goes. ``note`` is told of each module's forward on sampled
    steps; ``roots``: the watched models' ids, whose forward's end closes a forward's calls."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.roots: set[int] = set()
        self.said = False
        # this forward's norms, by id: (name, the norm, each call's [2, C] means and variances)
        self.calls: dict[int, tuple[str, nn.Module, list[torch.Tensor]]] = {}
        # this step's norms called twice or more in a forward: (name, norm, calls, gap)
        self.read: list[tuple[str, nn.Module, int, torch.Tensor]] = []
        self.steps: dict[str, int] = {}  # sampled steps in a row apart, by norm
        self.armed: list[Any] = []  # the eval-mode pre-hooks' handles

    def note(self, name: str, module: nn.Module, inputs: Any) -> None:
        """``module`` (named ``name``) ran a forward on ``inputs`` in a sampled step."""
        if id(module) in self.roots:
            self._close()
            return
        if self.said or not isinstance(module, _BatchNorm) or not module.training:
            return
        x = inputs[0] if isinstance(inputs, tuple) and inputs else None
        if (
            not module.track_running_stats
            or not torch.is_grad_enabled()
            or not isinstance(x, torch.Tensor)
            or x.dim() < 2
            or x.shape[0] < 2
        ):
            return
        x = x.detach().float().transpose(0, 1).reshape(x.shape[1], -1)  # [C, N * L]
        variance, mean = torch.var_mean(x, dim=1)
        self.calls.setdefault(id(module), (name, module, []))[2].append(
            torch.stack([mean, variance])
        )

    def _close(self) -> None:
        """A watched model's forward ended: its norms called twice or more are compared."""
        for name, module, stats in self.calls.values():
            if len(stats) >= 2:
                self.read.append((name, module, len(stats), _gap(torch.stack(stats))))
        self.calls = {}

    def judge(self) -> None:
        """At the sampled step's end (one host read)."""
        self._close()
        read, self.read = self.read, []
        if self.said:
            return
        gaps = torch.stack([r[3] for r in read]).tolist() if read else []
        apart: dict[str, tuple[nn.Module, int, float]] = {}
        for (name, module, calls, _), gap in zip(read, gaps, strict=True):
            if gap >= APART and gap > apart.get(name, (module, 0, 0.0))[2]:
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
    """``stats``: [calls, 2, C], each call's channels' means and variances. The median over
    channels of (shift + |log scale|) from the calls' blend, for the call furthest off."""
    mean, variance = stats[:, 0], stats[:, 1] + EPS  # [calls, C]
    blend_mean, blend_variance = mean.mean(0), variance.mean(0)  # [C]
    shift = (mean - blend_mean).abs() / variance.sqrt()
    scale = 0.5 * (blend_variance / variance).log().abs()
    return (shift + scale).median(dim=1).values.max()


def batch_norm_shared(layer: str, kind: str, calls: int, gap: float) -> Finding:
    return Finding(
        "batch-norm-shared",
        "warning",
        f"{layer} ({kind}) is called at {calls} places of one forward, on inputs whose channels "
        f"differ (a median of {gap:.2f} standard deviations of shift and log-scale from their "
        "blend): in training each call is normalised by its own batch's statistics, but the "
        "running mean and variance blend every place's, and now, in eval mode, each place is "
        "normalised by that blend, not its own: the model evaluated is not the one that trained",
        where=f"{layer} ({kind}), evaluated at {sites.models_caller()}",
        evidence={"layer": layer, "calls": calls, "gap": round(gap, 3)},
    )

"""``targets-outside-output-range``: a regression loss whose prediction comes straight out of a
bounded activation (a ReLU, a sigmoid, a tanh...) while a good share of its targets lie outside
that activation's range: standardised targets, half of them negative, into a final ReLU;
ratings from 1 to 5 into a sigmoid; images normalised by a mean and a standard deviation,
reconstructed by a decoder that ends in a sigmoid. The model cannot reach those targets, the
loss cannot fall below their distance to the range, and a ReLU pushed below 0 stops learning.

On sampled steps ``mse_loss``, ``l1_loss``, ``smooth_l1_loss`` and ``huber_loss`` (the nn
losses call them), reduced to a mean or a sum, have their prediction walked back through
view-like nodes and selections to one of the activations in ``BOUNDS``; its targets are then
read (one host read) for the share outside the range and for the loss's floor there. At
the run's end, a line of the script whose last ``STEPS`` such calls or more were out of
range makes the finding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import loss_inputs, sites
from treeqa.health.findings import Finding

BOUNDS: dict[str, tuple[str, float, float]] = {
    "ReluBackward0": ("ReLU", 0.0, math.inf),
    "SoftplusBackward0": ("softplus", 0.0, math.inf),
    "ExpBackward0": ("exp", 0.0, math.inf),
    "SigmoidBackward0": ("sigmoid", 0.0, 1.0),
    "HardsigmoidBackward0": ("hardsigmoid", 0.0, 1.0),
    "SoftmaxBackward0": ("softmax", 0.0, 1.0),
    "TanhBackward0": ("tanh", -1.0, 1.0),
}
"""Autograd nodes of activations with a fixed range: (name, lowest, highest). A clamp's and a
hardtanh's (ReLU6 too) range is read from the node (``_bounds``)."""
READ = (*BOUNDS, "HardtanhBackward0", "ClampBackward1", "ClampMinBackward0")
SHARE = 0.05
"""Targets outside the range, as a share of them all, below which a call is in range: a few
outliers out of reach are a loss's to bear."""
FLOOR = 0.05
"""The loss's floor (its value where each target is predicted by its nearest value in range)
as a share of its value where each is predicted by their mean (their variance, for
``mse_loss``), below which the targets out of range cost too little to matter."""
STEPS = 3
"""Judged calls in a row at one line, each out of range, the run's last there, for the
finding."""
SLACK = 1e-3
"""Targets within this much of the range (times its width, at least 1) count as in it: a
target stored as 1.0000001."""

Read = tuple[float, float, float, float, float]
"""(share outside, the loss's floor, the loss at the targets' mean, lowest, highest)."""
Said = tuple[str, str, float, float, Read]
"""(loss function, activation, lowest, highest, the reading) of a line's last call."""


class OutputRanges:
    """``note`` is given each regression loss on a sampled step."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        # line -> (judged calls in a row out of range there, the last one's reading)
        self.runs: dict[str, tuple[int, Said | None]] = {}

    def note(self, fname: str, input: torch.Tensor, target: Any, kwargs: dict[str, Any]) -> None:
        """``F.<fname>(input, target, **kwargs)`` with gradients, on a sampled step."""
        if kwargs.get("reduction", "mean") == "none":  # (masked after, maybe: not judged)
            return
        if not isinstance(target, torch.Tensor) or target.shape != input.shape:
            return
        prediction, target = _prediction(input, target)
        if prediction is None:
            return
        node = loss_inputs.producer(prediction, READ)
        bounds = None if node is None else _bounds(node)
        if bounds is None:
            return
        made, lo, hi = bounds
        where = sites.user_site(2)
        read = _outside(target.detach(), lo, hi, lambda d: _loss(fname, d, kwargs))
        if read is None:
            return
        share, floor, spread, _, _ = read
        if share < SHARE or floor < FLOOR * spread:
            self.runs[where] = (0, None)
            return
        calls = self.runs.get(where, (0, None))[0]
        self.runs[where] = (calls + 1, (fname, made, lo, hi, read))

    def finish(self) -> None:
        """The run ended: each line whose last ``STEPS`` judged calls or more were out of
        range (targets out of range only early on, label noise annealed away, are not)."""
        for where, (calls, said) in self.runs.items():
            if calls >= STEPS and said is not None:
                self.add(_finding(*said, where=where, calls=calls))


def _prediction(input: torch.Tensor, target: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """(the prediction, the target) of a loss whose arguments may be given the other way
    round (``mse_loss(target, prediction)``: the same loss), or (None, target)."""
    if input.grad_fn is not None:
        return input, target
    if target.grad_fn is not None:
        return target, input
    return None, target


def _bounds(node: Any) -> tuple[str, float, float] | None:
    """(activation, lowest, highest) of a bounded activation's node, or None."""
    name = type(node).__name__
    if name in BOUNDS:
        return BOUNDS[name]
    try:
        if name == "HardtanhBackward0":
            return "hardtanh", float(node._saved_min_val), float(node._saved_max_val)
        low = node._saved_min
        high = getattr(node, "_saved_max", None)
    except (AttributeError, RuntimeError, TypeError):  # another torch's names
        return None
    if low is None and high is None:
        return None
    lo = -math.inf if low is None else float(low)
    hi = math.inf if high is None else float(high)
    return "clamp", lo, hi


def _loss(fname: str, d: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    """The mean of ``F.<fname>`` over differences ``d`` between prediction and target."""
    if fname == "mse_loss":
        return d.square().mean()
    if fname == "l1_loss":
        return d.abs().mean()
    # smooth_l1_loss's beta, huber_loss's delta: quadratic within, linear beyond
    knee = float(kwargs.get("beta", kwargs.get("delta", 1.0)))
    a = d.abs()
    if fname == "smooth_l1_loss":
        return torch.where(a < knee, 0.5 * a.square() / max(knee, 1e-12), a - 0.5 * knee).mean()
    return torch.where(a <= knee, 0.5 * a.square(), knee * (a - 0.5 * knee)).mean()


def _outside(
    target: torch.Tensor, lo: float, hi: float, loss: Callable[[torch.Tensor], torch.Tensor]
) -> Read | None:
    """(share of the targets outside [lo, hi], the loss of predicting each its nearest value
    in range (the loss's floor), that of predicting their mean, lowest, highest); one host
    read. None for an empty or non-finite target."""
    if not target.numel():
        return None
    t = target.float()
    width = hi - lo if math.isfinite(hi - lo) else 1.0
    slack = SLACK * max(1.0, width)
    with torch.no_grad():
        outside = ((t < lo - slack) | (t > hi + slack)).float().mean()
        floor, spread = loss(t - t.clamp(lo, hi)), loss(t - t.mean())
        values = torch.stack([outside, floor, spread, t.min(), t.max()]).tolist()
    if not all(math.isfinite(v) for v in values):
        return None
    share, floor_, spread_, low, high = values
    return share, floor_, spread_, low, high


def _span(lo: float, hi: float) -> str:
    if math.isinf(hi):
        return f">= {lo:g}"
    if math.isinf(lo):
        return f"<= {hi:g}"
    return f"in [{lo:g}, {hi:g}]"


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%} of" if whole > 0 else "against"


def _finding(
    fname: str,
    made: str,
    lo: float,
    hi: float,
    read: Read,
    where: str,
    calls: int,
) -> Finding:
    share, floor, spread, low, high = read
    return Finding(
        "targets-outside-output-range",
        "warning",
        f"{fname}'s prediction comes out of a {made}, {_span(lo, hi)}, but {share:.0%} of its "
        f"targets lie outside that range (they run from {low:.3g} to {high:.3g}) on the last "
        f"{calls} sampled steps that called it: the model cannot reach them, and the loss cannot fall below "
        f"{floor:.3g}, its value at the nearest values in range ({_share(floor, spread)} the "
        f"{spread:.3g} of predicting the targets' mean)"
        + (", while outputs pushed below 0 get no gradient" if made == "ReLU" else ""),
        where=where,
        evidence={
            "function": fname,
            "produced_by": made,
            "range": [lo, hi],
            "outside": round(share, 4),
            "floor": round(floor, 6),
            "spread": round(spread, 6),
            "targets": [round(low, 6), round(high, 6)],
            "calls": calls,
        },
    )

"""A loss that is already a mean over its batch divided by the batch size again
(``loss-averaged-twice``): ``loss = criterion(out, y) / len(x)``, from code whose loss was a sum.
Each gradient is then the mean's over N, N the batch's rows: a step of SGD is N times smaller
(the learning rate in effect lr / N), and under an adaptive optimiser with an L2 weight decay
added to the gradient (Adam's ``weight_decay``) the decay weighs N times more against it.

On sampled steps, each mean loss the script computes with gradients (``cross_entropy``,
``nll_loss``, the binary cross-entropies, the regression losses; ``reduction="mean"``) is noted
by its autograd node with its input's rows (dim 0) and the line that called it. A backward of
that node walked back through constant factors (``loss_inputs.unscaled``) by a factor of 1/N,
N its rows (8 or more), is a loss averaged twice, where it is the step's one backward: k
micro-batches accumulated each divide by k, and a micro-batch of k rows so divided is right.
``STEPS`` sampled steps in a row so make the finding, where the optimiser's step scales with
the gradient: SGD (and ASGD), or an adaptive one whose groups add an L2 decay to the gradient.
Adam without decay, AdamW, Adagrad without decay, sign-based and unknown optimisers are
(nearly) unchanged by a constant factor on the loss, and are left alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health.findings import Finding

ROWS = 8
"""The fewest rows of a mean loss for a factor of 1/rows to be read as a second average."""
STEPS = 3
"""Sampled steps in a row whose one backward was a mean loss over N rows times 1/N."""
PLAIN = (torch.optim.SGD, torch.optim.ASGD)
"""Optimisers whose step is the gradient times the learning rate (with momentum)."""
COUPLED = (
    torch.optim.Adam,
    torch.optim.Adagrad,
    torch.optim.RMSprop,
    torch.optim.Adamax,
    torch.optim.NAdam,
    torch.optim.RAdam,
    torch.optim.Adadelta,
)
"""Adaptive optimisers whose ``weight_decay`` is added to the gradient (unless decoupled)."""


REDUCTION_AT: dict[str, tuple[int, tuple[int, ...]]] = {
    "cross_entropy": (6, (3, 5)),
    "nll_loss": (6, (3, 5)),
    "binary_cross_entropy": (5, (3, 4)),
    "binary_cross_entropy_with_logits": (5, (3, 4)),
    "mse_loss": (4, (2, 3)),
    "l1_loss": (4, (2, 3)),
    "smooth_l1_loss": (4, (2, 3)),
    "huber_loss": (2, ()),
}
"""Where each loss function takes ``reduction`` among its arguments (the input first), and
the legacy ``size_average`` and ``reduce``."""


def mean_reduced(fname: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``F.<fname>(*args, **kwargs)`` returns a mean over its elements: ``reduction="mean"``
    (the default), without the legacy ``size_average``/``reduce`` flags."""
    if fname not in REDUCTION_AT:
        return False
    at, legacy = REDUCTION_AT[fname]
    if kwargs.get("size_average") is not None or kwargs.get("reduce") is not None:
        return False
    if any(len(args) > i and args[i] is not None for i in legacy):
        return False
    return (args[at] if len(args) > at else kwargs.get("reduction", "mean")) == "mean"


class AveragedTwice:
    """``add``: where the finding goes. ``loss`` notes each sampled mean loss,
    ``backward`` each sampled backward, ``stepped`` the optimiser's step after them."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.means: dict[Any, tuple[int, str]] = {}  # this step's mean losses: node -> rows, line
        self.backwards: list[tuple[int, str] | None] = []  # each backward's (rows, line) if 1/N
        self.steps = 0  # sampled steps in a row so (-1 once said)
        self.function = ""

    def loss(self, fname: str, input: torch.Tensor, result: torch.Tensor, where: str) -> None:
        """``F.<fname>`` returned ``result``, a mean over ``input`` (rows: its dim 0)."""
        if self.steps >= 0 and result.grad_fn is not None and input.dim() >= 1:
            rows = int(input.shape[0])
            if rows >= ROWS:
                self.means[result.grad_fn] = (rows, where)
                self.function = fname

    def backward(self, node: Any, scale: float) -> None:
        """A sampled backward of a loss whose node is ``node`` once constant factors, ``scale``
        in all, are walked back. The noted nodes are let go: held, they keep the graph."""
        means, self.means = self.means, {}
        noted = means.get(node) if node is not None else None
        twice = noted is not None and math.isclose(scale * noted[0], 1.0, rel_tol=1e-3)
        self.backwards.append(noted if twice else None)

    def stepped(self, optimizer: torch.optim.Optimizer) -> None:
        """The clock's optimiser stepped on a sampled step, after its backwards."""
        backwards, self.backwards = self.backwards, []
        self.means = {}
        if self.steps < 0 or not backwards:
            return
        noted = backwards[0] if len(backwards) == 1 else None
        self.steps = self.steps + 1 if noted is not None else 0
        if noted is None or self.steps < STEPS:
            return
        effect = _effect(optimizer)
        if effect is None:
            return
        self.steps = -1
        rows, where = noted
        self.add(
            Finding(
                "loss-averaged-twice",
                "warning",
                f"the loss given to backward is F.{self.function}'s mean over the batch's {rows} "
                f"rows divided by {rows} again, on {STEPS} sampled steps in a row: {effect}",
                where=where,
                evidence={
                    "rows": rows,
                    "factor": round(1 / rows, 6),
                    "function": self.function,
                    "optimizer": type(optimizer).__name__,
                },
            )
        )


def _effect(optimizer: torch.optim.Optimizer) -> str | None:
    """What a loss 1/N of the mean does to ``optimizer``'s steps; None where (nearly)
    nothing: an adaptive optimiser that normalises the gradient, without an L2 decay in it."""
    name = type(optimizer).__name__
    if isinstance(optimizer, PLAIN):
        return (
            f"each {name} step is that many times smaller than the mean's gradient would make "
            "it (the learning rate in effect divided by the batch size), so the model trains "
            "far slower than its learning rate says"
        )
    if isinstance(optimizer, COUPLED):
        coupled = any(
            float(group.get("weight_decay") or 0.0) > 0
            and not group.get("decoupled_weight_decay", False)
            for group in optimizer.param_groups
        )
        if coupled:
            return (
                f"{name} normalises the gradient, but its weight_decay is added to it, so the "
                "decay weighs that many times more against the loss than its setting says"
            )
    return None

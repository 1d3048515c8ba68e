"""A loss that is already a mean over its batch divided by the batch size again
(``loss-averaged-twice``): ``loss = criterion(out, y) / len(x)``, from code whose loss was a sum.
Each gradient is then the mean's over N, N the batch's size: a step of SGD is N times smaller
(the learning rate in effect lr / N), and under an adaptive optimiser with an L2 weight decay
added to the gradient (Adam's ``weight_decay``) the decay weighs N times more against it.

On sampled steps, each mean loss the script computes with gradients (``cross_entropy``,
``nll_loss``, the binary cross-entropies, the regression losses; ``reduction="mean"``) is noted
by its autograd node with the batch sizes it may be divided by (``_sizes``: its input's rows,
8 or more, and the model's batch where those rows are its tokens flattened) and the line that
called it. A backward whose loss is one such mean, a sum of terms with one among them, or a
mean over all elements written by hand, times one constant factor of 1/N (``loss_inputs.
unscaled``; ``* 32 / 1024``, a sum over the data estimated from a batch, is two factors), N
one of those sizes, counts where every backward of the step does: k micro-batches accumulated
each divide by k, right whatever their rows, and are read as twice only where k is not their
rows. ``STEPS`` sampled steps in a row so make the finding, where the clock's optimiser holds
gradients (one over a frozen layer, stepped beside an optimiser that accumulates, takes none)
and its step scales with the gradient: SGD (and ASGD), or an adaptive one whose groups add an
L2 decay to the gradient. Adam without decay, AdamW, Adagrad without decay, sign-based and
unknown optimisers are (nearly) unchanged by a constant factor on the loss, and are left alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import loss_inputs, sites
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


Noted = tuple[tuple[int, ...], str, str]
"""A mean loss: the batch sizes it may be divided by (its rows; the model's batch, where the
rows are that batch's tokens flattened), its line, what it is (``F.cross_entropy's mean``)."""
Twice = tuple[int, str, str]
"""A backward's mean loss divided by a batch size again: that size, its line, what it is."""


class AveragedTwice:
    """``add``: where the finding goes. ``loss`` notes each sampled mean loss,
    ``backward`` each sampled backward, ``stepped`` the optimiser's step after them."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        # this step's mean losses: node -> (the batch sizes, line, what)
        self.means: dict[Any, Noted] = {}
        self.backwards: list[Twice | None] = []  # each backward's mean, where times 1/N
        self.steps = 0  # sampled steps in a row so (-1 once said)
        self.batch = 0  # the rows of the sampled step's first training forward's input

    def forward(self, given: list[torch.Tensor]) -> None:
        """A sampled step's training forward was ``given`` these tensors (a batch dim each)."""
        self.batch = int(given[0].shape[0]) if given else 0

    def loss(self, fname: str, input: torch.Tensor, result: torch.Tensor, where: str) -> None:
        """``F.<fname>`` returned ``result``, a mean over ``input`` (rows: its dim 0)."""
        if self.steps >= 0 and result.grad_fn is not None and input.dim() >= 1:
            rows = _sizes(int(input.shape[0]), self.batch)
            if rows:
                self.means[result.grad_fn] = (rows, where, f"F.{fname}'s mean")

    def backward(self, first: Any, node: Any, scale: float) -> None:
        """A sampled backward of a loss whose node is ``first``, and ``node`` once constant
        factors, ``scale`` in all, are walked back: a noted mean (or one by hand,
        ``x.mean()`` over N rows; or a sum of terms among which a noted mean is) times 1/N by
        one factor (``* 32 / 1024``, a sum over the data estimated from a batch, is two). The
        noted nodes are let go: held, they keep the graph."""
        means, self.means = self.means, {}
        noted = None
        one = first is not node and first is not None and first.next_functions[0][0] is node
        if one and node is not None:
            noted = means.get(node) or _summed_mean(node, means) or self._mean_by_hand(node)
        sizes = noted[0] if noted is not None else ()
        size = next((n for n in sizes if math.isclose(scale * n, 1.0, rel_tol=1e-3)), 0)
        self.backwards.append((size, *noted[1:]) if noted is not None and size else None)

    def _mean_by_hand(self, node: Any) -> Noted | None:
        """A mean over all elements written by hand (``((out - y) ** 2).mean()``) of ``ROWS``
        rows or more, and the line of the backward."""
        if type(node).__name__ != "MeanBackward0":
            return None
        sizes = node._saved_self_sym_sizes
        rows = _sizes(int(sizes[0]), self.batch) if sizes else ()
        return (rows, sites.user_site(), "a mean written by hand") if rows else None

    def stepped(self, optimizer: torch.optim.Optimizer) -> None:
        """The clock's optimiser stepped on a sampled step, after its backwards."""
        backwards, self.backwards = self.backwards, []
        self.means = {}
        if self.steps < 0 or not backwards:
            return
        # k micro-batches accumulated, each divided by k, are right whatever their rows: only
        # where k is not their rows are they read (2 of 64 rows, each divided by 64, are twice).
        noted = backwards[0] if all(backwards) else None
        if noted is not None and len(backwards) > 1 and noted[0] == len(backwards):
            noted = None
        self.steps = self.steps + 1 if noted is not None else 0
        if noted is None or self.steps < STEPS:
            return
        effect = _effect(optimizer)
        if effect is None:
            return
        if not any(p.grad is not None for g in optimizer.param_groups for p in g["params"]):
            # The clock's optimiser took no gradient (frozen, or run under no_grad): another
            # optimiser trains, accumulating these backwards over its own steps.
            self.steps = 0
            return
        self.steps = -1
        rows, where, what = noted
        self.add(
            Finding(
                "loss-averaged-twice",
                "warning",
                f"the loss given to backward is {what} divided again by the batch's size, "
                f"{rows}, on {STEPS} sampled steps in a row: {effect}",
                where=where,
                evidence={
                    "rows": rows,
                    "factor": round(1 / rows, 6),
                    "loss": what,
                    "optimizer": type(optimizer).__name__,
                },
            )
        )


def _summed_mean(node: Any, means: dict[Any, Noted]) -> Noted | None:
    """A noted mean among the terms ``node`` adds up (``(ce + 0.1 * mse) / B``: the sum
    divided, its main term a mean), where the noted terms share their batch sizes."""
    if type(node).__name__ != "AddBackward0":
        return None
    terms = loss_inputs.summed_terms(node) or []
    noted = [means[n] for n, _ in terms if n in means]
    if not noted or len({sizes for sizes, _, _ in noted}) != 1:
        return None
    sizes, where, what = noted[0]
    return sizes, where, f"a sum of {what} and other terms"


def _sizes(rows: int, batch: int) -> tuple[int, ...]:
    """The batch sizes a mean over ``rows`` rows may be divided by again: the rows (``ROWS`` or
    more), and the model's ``batch`` where the rows are its tokens flattened (``[B * T, V]``
    logits of a language model over ``[B, T]`` ids)."""
    sizes: tuple[int, ...] = (rows,) if rows >= ROWS else ()
    if batch >= ROWS and rows > batch and rows % batch == 0:
        sizes += (batch,)
    return sizes


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

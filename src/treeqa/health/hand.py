"""Parameters updated by hand, with no ``torch.optim`` optimiser to step: ``p.data.add_(p.grad,
alpha=-lr)`` (pytorch/examples' word_language_model), ``p -= lr * p.grad`` under ``no_grad``
(PyTorch's tutorial), ``p.data += -lr * p.grad`` on raw tensors, ``p -= lr * g`` for what
``torch.autograd.grad`` gave. Such a script's steps are seen as changes of the weights between
two backward (or ``torch.autograd.grad``) calls.

Before a backward runs, a few elements of the tensors its graph would train are noted (the
graph's leaves that need gradients: its ``nn.Parameter``s where it has any); when the script
next draws a DataLoader batch, runs a model's forward or another backward, or ends, and they
differ, the weights were updated in between: one step, ended there, with a ``HandUpdates``
standing for the optimiser.
Only what changed is that optimiser's: an attack that takes gradients of its input moves no
weight and trains nothing. After a step the largest few trained tensors are watched (~16
elements each); two backwards in a row that moved none of them look the graph up again (the
script went on to train something else).

``.data`` writes leave a tensor's version counter alone, so the values are compared.

The step size is estimated from the same elements (``rate``): their change over the gradient
the update used (read when the update is found, or just after the backward where the script
has cleared it by then), -delta / grad, the same for every element under plain SGD. It stands
as the ``HandUpdates``' learning rate, so the rate checks judge hand updates too: a negative one
is an update that adds the gradient (``lr-negative``), a decay by hand every batch collapses it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

WATCHED = 4
"""Trained tensors watched for the next update, the largest first."""
ELEMENTS = 16
"""Elements noted of each, spread over the whole tensor."""
GRAPH_NODES = 50_000
"""Autograd nodes looked through for the graph's leaves at most."""
MISSES = 2
"""Backwards in a row after which watched tensors that did not move are looked up again; twice
as many after each look-up that found nothing moving (up to ``MOST_MISSES``), so a script
that takes gradients and trains nothing (saliency maps) walks its graph ever more rarely."""
MOST_MISSES = 64
RATE_EVERY = 8
"""After the first ``RATE_EVERY`` updates, the step size is estimated at every ``RATE_EVERY``th."""
ASCENTS = 3
"""Estimates in a row along the gradient before the step size reads negative: SAM moves its
weights uphill once before the optimiser's first step, as an update by hand would."""
AGREE = 0.05
"""Elements whose -delta / grad lie within this share of their median agree on one step size."""


class HandUpdates(torch.optim.Optimizer):
    """The tensors a script updates by hand, as the optimiser the doctor's steps are counted
    by. Nothing steps it (``Optimizer.step`` raises NotImplementedError); its learning rate is
    the last estimate (``HandSteps.rate``), None where it is not known (momentum or Adam
    written by hand, gradients from ``torch.autograd.grad``), and the rate checks pass it by."""

    def __init__(self, params: Iterable[torch.Tensor]):
        super().__init__(list(params), {"lr": None})


def leaves(loss: torch.Tensor) -> list[torch.Tensor]:
    """The tensors a backward from ``loss`` gives gradients to (its ``nn.Parameter``s, where
    it has any: an input that needs gradients is no weight)."""
    found: dict[int, torch.Tensor] = {}
    stack: list[Any] = [loss.grad_fn]
    seen: set[Any] = set()
    while stack and len(seen) < GRAPH_NODES:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # an AccumulateGrad
        if isinstance(variable, torch.Tensor) and variable.layout == torch.strided:  # (not sparse)
            found.setdefault(id(variable), variable)
        stack.extend(child for child, _ in node.next_functions)
    tensors = list(found.values())
    params: list[torch.Tensor] = [t for t in tensors if isinstance(t, nn.Parameter)]
    return params or tensors


def _grad_marks(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor | None:
    grad = tensor.grad
    if grad is None or grad.layout != torch.strided:
        return None
    return torch.take(grad.detach(), index)


def _take(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor | None:
    """``tensor``'s elements at ``index``; None while its storage is freed: FSDP's
    ``fully_shard`` frees the whole parameters a forward and backward use between them."""
    if tensor.numel() and tensor.untyped_storage().nbytes() == 0:
        return None
    return torch.take(tensor.detach(), index)


def spread(tensor: torch.Tensor) -> torch.Tensor:
    """The indices of ``ELEMENTS`` elements spread over ``tensor`` (flattened)."""
    n = tensor.numel()
    return torch.linspace(0, max(n - 1, 0), min(n, ELEMENTS), device=tensor.device).long()


class HandSteps:
    """Whether the weights moved since the last backward (``moved``), and the ``HandUpdates``
    of what moved (``optimizer``)."""

    def __init__(self) -> None:
        self.optimizer: HandUpdates | None = None
        self.watched: list[torch.Tensor] = []  # [] until a backward's graph is looked up
        self.index: list[torch.Tensor] = []  # the elements noted of each (``spread``)
        self.candidates = False  # watched: the graph's leaves, not yet a step's trained ones
        # Their marks before the last backward (None for a tensor whose storage was freed).
        self.noted: list[torch.Tensor | None] | None = None
        self.lr: float | None = None  # the last step size estimated (``rate``)
        self.grads: list[torch.Tensor | None] = []  # their gradients just after that backward
        self.misses = 0
        self.patience = MISSES  # misses before the next look-up
        self.updates = 0  # steps found
        self.ascents = 0  # estimates in a row with a negative step size

    def backward(self, loss: Any) -> None:
        """A backward from ``loss`` is about to run (after ``moved`` was asked)."""
        if not self.watched and isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
            self.watch(leaves(loss))
            self.candidates = True
        self.noted = self.marks() if self.watched else None
        self.grads = []

    def backward_done(self) -> None:
        """That backward has run: its gradients are noted for the step size, on the updates
        that estimate it, in case the script clears them before the next step is found."""
        if self.noted is not None and self._estimates():
            self.grads = [_grad_marks(t, i) for t, i in zip(self.watched, self.index, strict=True)]

    def watch(self, tensors: list[torch.Tensor]) -> None:
        self.watched, self.index = tensors, [spread(t) for t in tensors]

    def marks(self) -> list[torch.Tensor | None]:
        return [_take(t, i) for t, i in zip(self.watched, self.index, strict=True)]

    def moved(self) -> bool:
        """The watched tensors changed since the last backward: a step made by hand; its
        ``optimizer`` holds what changed (a new one where that is not the last's)."""
        if self.noted is None:
            return False
        noted, self.noted = self.noted, None
        moving = (
            t
            for t, i, a in zip(self.watched, self.index, noted, strict=True)
            if a is not None and (b := _take(t, i)) is not None and not a.equal(b)
        )
        # Of a look-up's leaves, those that moved; of a step's, the first to have moved will do.
        changed = list(moving) if self.candidates else list(itertools.islice(moving, 1))
        if not changed:
            self.misses += 1
            if self.misses >= self.patience:  # the script trains something else now, or nothing
                if self.candidates:  # a look-up's leaves, none of which moved
                    self.patience = min(2 * self.patience, MOST_MISSES)
                self.watch([])
                self.misses = 0
            return False
        self.misses, self.patience = 0, MISSES
        if self._estimates():  # (before re-watching: noted and grads are of these tensors)
            rate = self.rate(noted)
            self.ascents = self.ascents + 1 if rate is not None and rate < 0 else 0
            self.lr = None if rate is not None and 0 < self.ascents < ASCENTS else rate
        self.updates += 1
        if self.candidates:
            last = self.optimizer.param_groups[0]["params"] if self.optimizer else []
            if {id(t) for t in changed} != {id(t) for t in last}:
                self.optimizer = HandUpdates(changed)
            self.watch(sorted(changed, key=lambda t: -t.numel())[:WATCHED])
            self.candidates = False
        assert self.optimizer is not None
        self.optimizer.param_groups[0]["lr"] = self.lr
        return True

    def went_uphill(self) -> bool:
        """The one update found so far moved the weights along their gradient: SAM's move
        uphill, which it puts back as its optimiser's first step begins."""
        return self.updates == 1 and self.ascents == 1

    def _estimates(self) -> bool:
        """This update's step size is estimated: the first ``RATE_EVERY``, then every such."""
        return self.updates < RATE_EVERY or self.updates % RATE_EVERY == 0

    def rate(self, noted: list[torch.Tensor | None]) -> float | None:
        """The step size of the update just found, from the watched elements: -delta / grad
        where both are non-zero, their median when nearly all agree on it (plain SGD; clipping
        scales every gradient alike). An update along the gradient (a negative step) need only
        agree on its sign (momentum written by hand, its sign wrong), and counts only for
        ``nn.Parameter``s: an image ascended by hand to excite a frozen model's units (its
        input, the graph's only leaf) does that on purpose. None where unknown: fewer than 4
        such elements, or an update not proportional to the gradient (momentum, Adam)."""
        ratios, rounding = [], []
        for k, (t, i, before) in enumerate(zip(self.watched, self.index, noted, strict=True)):
            grad = _grad_marks(t, i)
            if grad is None or not grad.any():  # cleared since: as it was after the backward
                grad = self.grads[k] if k < len(self.grads) else None
            after = _take(t, i)
            if grad is None or before is None or after is None or not t.is_floating_point():
                continue
            delta, used = after - before, (grad != 0) & (after != before)
            g = grad[used].double().cpu()
            ratios.append(-delta[used].double().cpu() / g)
            # A weight is rounded to its precision after each update: delta is exact to about
            # eps x |weight|, so a small step's ratio is only known that well.
            rounding.append(torch.finfo(t.dtype).eps * after[used].double().cpu().abs() / g.abs())
        r = torch.cat(ratios) if ratios else torch.zeros(0)
        if r.numel() < 4:
            return None
        median = float(r.median())
        if median < 0:
            weights = all(isinstance(t, nn.Parameter) for t in self.watched)
            return median if weights and (r < 0).double().mean() >= 0.9 else None
        agree = (r - median).abs() <= AGREE * median + torch.cat(rounding)
        return median if agree.double().mean() >= 0.8 else None

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


class HandUpdates(torch.optim.Optimizer):
    """The tensors a script updates by hand, as the optimiser the doctor's steps are counted
    by. Nothing steps it (``Optimizer.step`` raises NotImplementedError); its learning rate is
    not known (None), so the checks of the rate pass it by."""

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
        self.noted: list[torch.Tensor] | None = None  # their marks before the last backward
        self.misses = 0
        self.patience = MISSES  # misses before the next look-up

    def backward(self, loss: Any) -> None:
        """A backward from ``loss`` is about to run (after ``moved`` was asked)."""
        if not self.watched and isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
            self.watch(leaves(loss))
            self.candidates = True
        self.noted = self.marks() if self.watched else None

    def watch(self, tensors: list[torch.Tensor]) -> None:
        self.watched, self.index = tensors, [spread(t) for t in tensors]

    def marks(self) -> list[torch.Tensor]:
        return [torch.take(t.detach(), i) for t, i in zip(self.watched, self.index, strict=True)]

    def moved(self) -> bool:
        """The watched tensors changed since the last backward: a step made by hand; its
        ``optimizer`` holds what changed (a new one where that is not the last's)."""
        if self.noted is None:
            return False
        noted, self.noted = self.noted, None
        moving = (
            t
            for t, i, a in zip(self.watched, self.index, noted, strict=True)
            if not a.equal(torch.take(t.detach(), i))
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
        if self.candidates:
            last = self.optimizer.param_groups[0]["params"] if self.optimizer else []
            if {id(t) for t in changed} != {id(t) for t in last}:
                self.optimizer = HandUpdates(changed)
            self.watch(sorted(changed, key=lambda t: -t.numel())[:WATCHED])
            self.candidates = False
        return True

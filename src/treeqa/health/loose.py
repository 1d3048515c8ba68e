"""``nn.Parameter``s a loss uses outside the models the clock trains: a learned temperature
(CLIP's ``logit_scale``) or the weights of several losses kept beside the model in the script,
or a second model the loss runs through with gradients (a domain classifier, a DQN's target
network whose targets were not detached). No optimiser that steps holds them, so they stay
where they started, though they get a gradient at every step (``not-in-optimiser``).

Read once, at the clock's ``ORPHAN_STEP``: the step's loss graph is walked to its leaves (its
``AccumulateGrad`` nodes stay reachable after the backward), and each ``nn.Parameter`` there
that neither the clock's models nor a stepping optimiser holds is noted with its gradient and
value. A sampled step ``WAIT`` steps later or more judges it: a fresh gradient with the value
unchanged means nothing applies it (an optimiser that accumulates over 32 micro-batches first
steps at the 32nd: judged at step 20, its parameters read as stuck). Updated by hand (``p -= lr * p.grad``, through ``.data`` too), or by an optimiser that
starts stepping later, its value moves and it is left alone. Plain tensors with
``requires_grad`` (inputs differentiated for a physics-informed loss, an adversarial
perturbation) are no parameters and are not read.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from treeqa.health import sites

MOST_NODES = 200_000
"""The walk stops here: a graph this large is read in ~0.2 s once; a larger one is left."""
WAIT = 50
"""Steps after ``ORPHAN_STEP`` before a noted parameter is judged."""
MOST_VALUES = 1_000_000
"""Values copied to tell whether a parameter moved; a larger one is told by its version."""


def leaves(loss: torch.Tensor) -> list[torch.Tensor]:
    """The leaf tensors ``loss``'s graph accumulates gradients into (``[]`` past
    ``MOST_NODES``)."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    todo: list[Any] = [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if len(seen) > MOST_NODES:
            return []
        variable = getattr(node, "variable", None)  # an AccumulateGrad node's leaf
        if isinstance(variable, torch.Tensor):
            found.append(variable)
        todo += [child for child, _ in node.next_functions]
    return found


class LooseParameters:
    def __init__(self) -> None:
        # id -> (the parameter, weakly; its gradient's id and version; its value or version)
        self.noted: dict[int, tuple[weakref.ref[torch.Tensor], tuple[int, int], Any]] = {}
        self.names: dict[int, str] = {}
        self.at = 0  # the step they were noted at

    def look(
        self, step: int, loss: torch.Tensor, held: set[int], known: Iterable[torch.Tensor]
    ) -> None:
        """At ``ORPHAN_STEP``: the parameters ``loss`` reaches that neither ``held`` (the
        stepping optimisers' parameters, by id) nor ``known`` (the clock's models', and those
        ``module-not-registered`` names) has."""
        self.at = step
        skip = held | {id(p) for p in known}
        loose = [
            p
            for p in leaves(loss)
            if isinstance(p, nn.Parameter) and id(p) not in skip and p.grad is not None
        ]
        self.names = sites.script_names(loose)
        for p in loose:
            grad = p.grad
            assert grad is not None
            value = p.detach().clone() if p.numel() <= MOST_VALUES else p._version
            self.noted[id(p)] = (weakref.ref(p), (id(grad), grad._version), value)

    def stuck(self, step: int, held: set[int]) -> list[tuple[str, torch.Tensor]]:
        """On a sampled step ``WAIT`` steps on: the noted parameters still held by no stepping
        optimiser whose gradient is fresh and whose value has not moved; each is then let go."""
        found: list[tuple[str, torch.Tensor]] = []
        if step < self.at + WAIT:
            return found
        for key, (ref, mark, value) in list(self.noted.items()):
            p = ref()
            if p is None or key in held:
                del self.noted[key]
                continue
            grad = p.grad
            if grad is None or (id(grad), grad._version) == mark:
                continue
            del self.noted[key]
            moved = p._version != value if isinstance(value, int) else not torch.equal(p, value)
            if not moved:
                shape = "x".join(map(str, p.shape)) or "a scalar"
                found.append((self.names.get(key, f"a parameter ({shape})"), p))
        return found

"""``target-not-detached``: a loss's target computed from another forward of the model being
trained, with gradients through it, so the step moves the target towards the prediction as
much as the prediction towards the target.

The usual case is a temporal-difference target: ``q = net(s).gather(1, a)`` and ``target = r +
gamma * net(s2).max(1)[0]`` without ``torch.no_grad()`` (or ``.detach()``), scored by
``F.mse_loss(q, target)`` or ``smooth_l1_loss``; an actor-critic's critic with ``r + gamma *
critic(s2)``. Semi-gradient methods hold the target fixed; with gradients through it the update
minimises the Bellman residual, which in a stochastic environment settles on the wrong values
(and in a deterministic one learns more slowly). SimSiam or BYOL without the stop-gradient on
the other view's projection is the same form, and collapses.

On sampled steps, the outputs of each trained model's forwards (their autograd nodes) are kept
(``FORWARDS`` at most). A training loss (``losses``: the classification and regression losses
read for their targets) whose target has gradients is read: its graph and its input's are
walked back ``DEPTH`` nodes at most, to the forwards each was made from. A target made from a
forward of a model (not the output itself: a periodic boundary condition's ``u(x1)``) that made
the input in another forward, with no forward in common (a physics-informed residual's two
sides come from one), is a candidate where the target adds a reward (a tensor without
gradients, or a number: bootstrapped) or the input reaches the model through a head of its own
(SimSiam's predictor). Two passes of one model scored against each other as they are (a
Π-model, R-Drop, TRADES) train both on purpose and are not. A candidate counts when the
backward reaches its prediction (a hook on it: a TD error only logged is no loss) and the next
optimiser step changes that model's weights (its first or last: a GAN's feature matching
scores the generator against the critic's features of real images, through the critic, and
the generator's optimiser leaves the critic alone). ``STEPS`` such sampled steps make the
finding, at the loss's line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from treeqa.health import graphs, sites
from treeqa.health.collapse import tensors
from treeqa.health.findings import Finding
from treeqa.health.loss_inputs import VIEWS

FORWARDS = 16
"""Forwards of trained models whose outputs are kept a sampled step."""
DEPTH = 256
"""Autograd nodes walked back from a loss's target, or its input, to the forwards (a return
over 25 steps built in a loop is 77)."""
STEPS = 3
"""Sampled steps with such a target, each followed by a step of that model's weights."""


class TargetGradients:
    """``add``: where the finding goes."""

    def __init__(
        self, add: Callable[[Finding], None], models: Callable[[], list[nn.Module]]
    ) -> None:
        """``models()``: the models the monitor watches (the trained ones)."""
        self.add, self.models = add, models
        self.outputs: dict[Any, tuple[int, nn.Module]] = {}  # output node -> (forward, model)
        self.forwards = 0  # this sampled step's forwards kept
        # this step's candidates: (the model's first and last weights, their versions,
        # whether the backward reached the prediction, where, the model's class)
        self.pending: list[tuple[Any, tuple[int, int], list[bool], str, str]] = []
        self.steps: list[int] = []
        self.step = 0
        self.said = False

    def begin_step(self, step: int) -> None:
        """The sampled step ``step`` starts."""
        self.outputs, self.forwards, self.step = {}, 0, step

    def end_step(self) -> None:
        """The sampled step ends: its autograd nodes are let go."""
        self.outputs = {}

    def forward(self, module: nn.Module, output: Any) -> None:
        """A trained model finished a forward in a sampled step, giving ``output``."""
        if self.said or not torch.is_grad_enabled():
            return
        if not any(module is m for m in self.models()):  # (a layer of one: its model's)
            return
        if self.forwards >= FORWARDS:
            return
        self.forwards += 1
        for y in tensors(output):
            if y.grad_fn is not None:
                self.outputs[y.grad_fn] = (self.forwards, module)

    def target(self, target: Any, input: Any) -> None:
        """A training loss scored ``input`` against ``target`` on a sampled step."""
        if self.said or len(self.pending) >= FORWARDS or not self.outputs:
            return
        if not isinstance(target, torch.Tensor) or target.grad_fn is None:
            return
        if not isinstance(input, torch.Tensor) or input.grad_fn is None:
            return
        if _through_views(target.grad_fn) in self.outputs:  # the output itself
            return
        made, given = self._forwards(target.grad_fn), self._forwards(input.grad_fn)
        if not made or not given or {n for n, _ in made} & {n for n, _ in given}:
            return
        models = {id(m) for _, m in made}
        shared = [m for _, m in given if id(m) in models]
        if not shared:
            return
        # A target to hold fixed: one that adds a reward to the model's value of the next
        # state (a bootstrapped target), or one the prediction reaches through a head of its
        # own (SimSiam's predictor: the first forward its graph meets is another model's). Two
        # passes of one model scored against each other as they are (a Π-model, R-Drop,
        # TRADES) train both on purpose.
        ahead = id(given[0][1]) not in models
        if not (ahead or self._adds_constant(target.grad_fn)):
            return
        weights = [p for p in shared[0].parameters() if p.requires_grad]
        if not weights:
            return
        fired = [False]  # set when the backward reaches the prediction (a loss only logged: not)
        input.register_hook(functools.partial(_reached, fired))
        ends = (weights[0], weights[-1])
        versions = (ends[0]._version, ends[1]._version)
        self.pending.append((ends, versions, fired, sites.user_site(3), type(shared[0]).__name__))

    def stepped(self) -> None:
        """An optimiser step ended: a candidate counts where the backward reached its
        prediction and the step changed its model's weights (its first or last)."""
        pending, self.pending = self.pending, []
        for ends, versions, fired, where, model in pending:
            changed = (ends[0]._version, ends[1]._version) != versions
            if not fired[0] or not changed or self.step in self.steps:
                continue
            self.steps.append(self.step)
            if len(self.steps) >= STEPS and not self.said:
                self.said = True
                self.add(_finding(model, where, self.steps))

    def _adds_constant(self, node: Any) -> bool:
        """Whether the graph from ``node`` down to the forwards' outputs adds a tensor with no
        gradient, or a number (a reward: ``r + gamma * V(s')``)."""
        for met in graphs.walk(node, DEPTH, self.outputs):
            name = type(met).__name__
            if met in self.outputs:
                continue
            if name in ("AddBackward1", "SubBackward1", "RsubBackward1"):
                return True
            if name in ("AddBackward0", "SubBackward0") and any(
                child is None for child, _ in met.next_functions
            ):
                return True
        return False

    def _forwards(self, node: Any) -> list[tuple[int, nn.Module]]:
        """The forwards (number, model) whose outputs the graph from ``node`` was made from,
        nearest first, ``DEPTH`` nodes back at most, on through them (SimSiam's predictor's
        forward, then its encoder's)."""
        return [self.outputs[n] for n in graphs.walk(node, DEPTH) if n in self.outputs]


def _reached(fired: list[bool], grad: torch.Tensor) -> None:
    """A tensor hook: the backward reached the prediction."""
    fired[0] = True


def _through_views(node: Any) -> Any:
    """``node``, or the node under the views (and copies) it passes a tensor through."""
    while node is not None and VIEWS.fullmatch(type(node).__name__) and node.next_functions:
        node = node.next_functions[0][0]
    return node


def _finding(model: str, where: str, steps: list[int]) -> Finding:
    return Finding(
        "target-not-detached",
        "warning",
        f"the loss's target is computed from another forward of {model}, the model whose "
        f"prediction it scores, with gradients through it (sampled steps {steps}): each step "
        "also moves the target towards the prediction. A temporal-difference target (r + "
        "gamma * max Q(s')) wants torch.no_grad() or .detach(): with gradients through it the "
        "update minimises the Bellman residual, which settles on wrong values where "
        "transitions are random; a self-supervised target (SimSiam's, BYOL's projection "
        "of the other view) wants its stop-gradient too, or the model collapses",
        where=where,
        evidence={"model": model, "steps": steps},
    )

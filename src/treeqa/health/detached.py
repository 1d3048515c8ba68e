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

from treeqa.health import sites
from treeqa.health.collapse import tensors
from treeqa.health.findings import Finding

FORWARDS = 16
"""Forwards of trained models whose outputs are kept a sampled step."""
DEPTH = 256
"""Autograd nodes walked back from a loss's target, or its input, to the forwards (a return
over 25 steps built in a loop is 77)."""
STEPS = 3
"""Sampled steps with such a target, each followed by a step of that model's weights."""
VIEWS = frozenset(
    {
        "ViewBackward0",
        "UnsafeViewBackward0",
        "ReshapeAliasBackward0",
        "SqueezeBackward0",
        "SqueezeBackward1",
        "SqueezeBackward2",
        "UnsqueezeBackward0",
        "ExpandBackward0",
        "CloneBackward0",
        "ToCopyBackward0",
    }
)
"""Nodes that pass a forward's output on as it is: a target made through them is the output."""


class TargetGradients:
    """``add``: where the finding goes."""

    def __init__(
        self, add: Callable[[Finding], None], models: Callable[[], list[nn.Module]]
    ) -> None:
        """``models()``: the models the monitor watches (the trained ones)."""
        self.add, self.models = add, models
        self.outputs: dict[Any, tuple[int, nn.Module]] = {}  # output node -> (forward, model)
        # this step's candidates: (the model's first and last weights, their versions,
        # whether the backward reached the prediction, where, the model's class)
        self.pending: list[tuple[Any, tuple[int, int], list[bool], str, str]] = []
        self.steps: list[int] = []
        self.step = 0
        self.said = False

    def begin_step(self, step: int) -> None:
        """The sampled step ``step`` starts."""
        self.outputs, self.step = {}, step

    def forward(self, module: nn.Module, output: Any) -> None:
        """A trained model finished a forward in a sampled step, giving ``output``."""
        if self.said or not torch.is_grad_enabled():
            return
        if not any(module is m for m in self.models()):  # (a layer of one: its model's)
            return
        forwards = len({n for n, _ in self.outputs.values()})
        if forwards >= FORWARDS:
            return
        for y in tensors(output):
            if y.grad_fn is not None:
                self.outputs[y.grad_fn] = (forwards + 1, module)

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
        if not made or not given or made & given:
            return
        models = {id(m) for n, m in self.outputs.values() if n in made}
        shared = [m for n, m in self.outputs.values() if n in given and id(m) in models]
        if not shared:
            return
        # A target to hold fixed: one that adds a reward to the model's value of the next
        # state (a bootstrapped target), or one the prediction reaches through a head of its
        # own (SimSiam's predictor). Two passes of one model scored against each other as they
        # are (a Π-model, R-Drop, TRADES) train both on purpose.
        nearest = self._nearest(input.grad_fn)
        ahead = nearest is not None and id(nearest) not in models
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

    def _nearest(self, node: Any) -> nn.Module | None:
        """The model of the first forward output the graph from ``node`` reaches."""
        seen, frontier = {node}, [node]
        while frontier and len(seen) < DEPTH:
            node = frontier.pop(0)
            if node in self.outputs:
                return self.outputs[node][1]
            for child, _ in node.next_functions:
                if child is not None and child not in seen:
                    seen.add(child)
                    frontier.append(child)
        return None

    def _adds_constant(self, node: Any) -> bool:
        """Whether the graph from ``node`` down to the forwards' outputs adds a tensor with no
        gradient, or a number (a reward: ``r + gamma * V(s')``)."""
        seen, frontier = {node}, [node]
        while frontier and len(seen) < DEPTH:
            node = frontier.pop(0)
            if node in self.outputs:
                continue
            name = type(node).__name__
            if name in ("AddBackward1", "SubBackward1", "RsubBackward1"):
                return True
            children = [child for child, _ in node.next_functions]
            if name in ("AddBackward0", "SubBackward0") and None in children:
                return True
            for child in children:
                if child is not None and child not in seen:
                    seen.add(child)
                    frontier.append(child)
        return False

    def _forwards(self, node: Any) -> set[int]:
        """The forwards (by number) whose outputs the graph from ``node`` was made from,
        ``DEPTH`` nodes back at most, on through them (SimSiam's predictor's forward, then its
        encoder's)."""
        found: set[int] = set()
        seen, frontier = {node}, [node]
        while frontier and len(seen) < DEPTH:
            node = frontier.pop(0)
            if node in self.outputs:
                found.add(self.outputs[node][0])
            for child, _ in node.next_functions:
                if child is not None and child not in seen:
                    seen.add(child)
                    frontier.append(child)
        return found


def _reached(fired: list[bool], grad: torch.Tensor) -> None:
    """A tensor hook: the backward reached the prediction."""
    fired[0] = True


def _through_views(node: Any) -> Any:
    """``node``, or the node under the views (and copies) it passes a tensor through."""
    while node is not None and type(node).__name__ in VIEWS and node.next_functions:
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

"""Gradients an optimiser steps with that are off by a loss scaler's scale
(``gradients-off-by-loss-scale``).

A ``GradScaler`` multiplies the loss by its scale (65,536 to start) and ``scaler.step(optimizer)``
divides the gradients back (``unscale_``) before the optimiser steps, skipping a step whose
gradients overflowed. Two slips leave the step off by the scale:

- the loss is scaled (``scaler.scale(loss).backward()``) and the optimiser steps on its own
  (``optimizer.step()``): the gradients stay 65,536 times too large: an SGD step jumps by as
  much, Adam's ``eps`` shrinks to nothing beside them, and no overflowed step is skipped;
- the loss is not scaled (``loss.backward()``; ``scaler.scale(loss)`` made and left unused)
  and ``scaler.step(optimizer)`` divides its gradients by the scale all the same: an SGD step
  is 65,536 times too small.

The autograd node of each loss ``GradScaler.scale`` returns is noted (by the scalers' wrapper,
``scalers.py``), and each backward is scaled by a scaler where its loss's graph reaches that
node within ``HOPS`` nodes (``scaler.scale(loss) / 4``, two scaled losses summed). The
backwards since the last optimiser step decide, each only for an optimiser whose parameters
its graph reaches (walked to the parameters' ``AccumulateGrad`` nodes, ``WALKS`` graphs a run
at most: a model beside, a second scaler's, a value baseline backpropagated on its own are
another optimiser's): one scaled by a scaler whose state for the optimiser now stepping was
never unscaled (missing, or READY: ``scaler.step`` unscales first, and so does
``scaler.unscale_``; a wrapper such as Lookahead, unscaled as itself, shares its inner
optimiser's ``param_groups``), the first slip, judged as the step begins; one not scaled, where
a scaler unscales the optimiser's gradients, the second, judged in ``unscale_`` (micro-batches
of which only the last was scaled; a second loss backpropagated as it is beside a scaled one).
A scaler that is disabled, or whose scale is 1, changes nothing and is left alone. Not seen:
gradients taken by ``torch.autograd.grad`` and set by hand, a loss scaled twice.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.amp import GradScaler
from torch.amp.grad_scaler import OptState
from torch.optim.optimizer import register_optimizer_step_pre_hook

from treeqa.health import loss_inputs, sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_calls

HOPS = 32
"""Autograd nodes looked through from a backward's loss for a scaler's multiplication (a mean,
a division by the micro-batches, a sum of scaled losses come between)."""
WALKS = 64
"""Graphs walked to their parameters, at most in a run: a step judged after that is let be (a
loop with an optimiser beside the scaled one walks at each step)."""
WALKED = 20_000
"""Nodes walked a graph, at most."""
KEPT = 16
"""Backwards kept since the last optimiser step, the latest (micro-batches)."""
OUTPUTS = 8
"""Scaled losses held until a backward (more: they were not backpropagated, but differentiated
by ``torch.autograd.grad``, and are let go)."""


@dataclass
class Backward:
    """A backward since the last optimiser step: its losses' nodes, the scaler that scaled
    them (None: none did) and, where none did, its line."""

    roots: list[Any]
    scaler: weakref.ref[GradScaler] | None
    site: str


class ScaledSteps:
    """``add``: where the finding goes (``HealthMonitor.add``); ``safely``: how the optimiser
    hook runs (``HealthMonitor.safely``)."""

    def __init__(self, add: Callable[[Finding], None], safely: Callable[..., None]):
        self.add = add
        self.safely = safely
        self.wrappers = Wrappers()
        self.handle: Any = None  # the optimiser pre-hook, from the first scaled loss on
        # The nodes of the losses scalers returned since the last backward, by id, and which
        # scaler each (the nodes held, so their ids stay theirs; let go at the backward).
        self.outputs: dict[int, tuple[Any, weakref.ref[GradScaler]]] = {}
        self.window: list[Backward] = []  # the backwards since the last optimiser step
        self.unscaled: set[int] = set()  # ids of the param_groups unscaled in that time
        self.walks = 0
        self.reported = False

    def install(self) -> None:
        self.wrappers.add(note_calls(GradScaler, "unscale_", self._unscaling))

    def uninstall(self) -> None:
        self.wrappers.undo()
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        self.outputs, self.window = {}, []

    def scaled(self, scaler: GradScaler, output: Any) -> None:
        """``scaler.scale`` returned ``output`` (a tensor, or an iterable of them)."""
        if self.reported or not scaler.is_enabled():
            return
        tensors = loss_inputs.given_tensors(output)
        if len(self.outputs) >= OUTPUTS:  # scaled, never backpropagated: autograd.grad's
            self.outputs = {}
        for tensor in tensors:
            if tensor.grad_fn is not None:
                self.outputs[id(tensor.grad_fn)] = (tensor.grad_fn, weakref.ref(scaler))
        if self.handle is None:
            self.handle = register_optimizer_step_pre_hook(
                functools.partial(self.safely, self._stepping)
            )

    def backward(self, tensors: Any) -> None:
        """``torch.autograd.backward(tensors)`` is about to run."""
        if self.reported:
            return
        roots = loss_inputs.given_tensors(tensors)
        nodes = [t.grad_fn for t in roots if t.grad_fn is not None]
        scaler = _scaled_by(nodes, self.outputs)
        self.outputs = {}
        site = "" if scaler is not None else sites.user_site()
        self.window.append(Backward(nodes, weakref.ref(scaler) if scaler else None, site))
        del self.window[:-KEPT]

    def _stepping(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """An optimiser's step begins: the first slip, gradients still scaled."""
        window, unscaled = self.window, self.unscaled
        self.window, self.unscaled, self.outputs = [], set(), {}  # (no graph held past a step)
        if self.reported or id(optimizer.param_groups) in unscaled:
            return  # (a wrapper such as Lookahead shares its inner optimiser's groups)
        for backward in window:
            scaler = backward.scaler() if backward.scaler is not None else None
            if scaler is None or not scaler.is_enabled():
                continue
            state = scaler._per_optimizer_states.get(id(optimizer))  # (a read makes no entry)
            if state is not None and state["stage"] is not OptState.READY:
                continue  # unscaled by scaler.step or scaler.unscale_
            scale = scaler.get_scale()
            if scale > 1 and self._reaches(backward, optimizer):
                found = stepped_scaled(type(optimizer).__name__, scale)
                self._report(found, sites.user_site())
                return

    def _unscaling(self, scaler: GradScaler, optimizer: Any = None, *_: Any, **__: Any) -> None:
        """``scaler.unscale_(optimizer)`` (which ``scaler.step`` calls) is about to run: the
        second slip, gradients divided by a scale they never had."""
        if self.reported or not isinstance(optimizer, torch.optim.Optimizer):
            return
        self.unscaled.add(id(optimizer.param_groups))
        if not scaler.is_enabled():
            return
        state = scaler._per_optimizer_states.get(id(optimizer))
        if state is not None and state["stage"] is not OptState.READY:
            return  # (torch raises: unscale_ called twice)
        for backward in self.window:
            if backward.scaler is None and self._reaches(backward, optimizer):
                scale = scaler.get_scale()
                if scale > 1:
                    found = unscaled_stepped(type(optimizer).__name__, scale)
                    self._report(found, backward.site)
                return

    def _reaches(self, backward: Backward, optimizer: torch.optim.Optimizer) -> bool:
        """Whether the backward's graph reaches one of the optimiser's parameters (a walk of
        ``WALKED`` nodes at most; False once ``WALKS`` walks were made)."""
        if self.walks >= WALKS:
            return False
        self.walks += 1
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        return _reached(backward.roots, params)

    def _report(self, found: Finding, where: str) -> None:
        self.reported = True
        found.where = where
        self.add(found)
        self.outputs, self.window = {}, []


def _scaled_by(nodes: list[Any], outputs: dict[int, tuple[Any, Any]]) -> GradScaler | None:
    """The scaler whose multiplication the graph from ``nodes`` reaches within ``HOPS`` nodes
    (a backward of ``scaler.scale(loss) / 4`` or of two scaled losses summed is scaled)."""
    if not outputs:
        return None
    seen: set[int] = set()
    queue = list(nodes)
    while queue and len(seen) < HOPS:
        node = queue.pop(0)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if id(node) in outputs:
            return outputs[id(node)][1]()
        queue += [child for child, _ in node.next_functions]
    return None


def _reached(nodes: list[Any], params: set[int]) -> bool:
    """Whether the graph from ``nodes`` accumulates into one of ``params`` (by id)."""
    seen: set[int] = set()
    queue = list(nodes)
    while queue and len(seen) < WALKED:
        node = queue.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)  # an AccumulateGrad's parameter
        if variable is not None and id(variable) in params:
            return True
        queue += [child for child, _ in node.next_functions]
    return False


def stepped_scaled(optimizer: str, scale: float) -> Finding:
    return Finding(
        "gradients-off-by-loss-scale",
        "error",
        f"{optimizer}.step() ran on gradients still multiplied by the loss scaler's scale "
        f"({scale:,.0f}): the loss went through scaler.scale(loss) but the step did not go "
        "through scaler.step(optimizer), which divides them back first and skips a step whose "
        f"gradients overflowed; each update is {scale:,.0f} times what it should be (Adam's "
        "eps no longer counts beside them), and overflowed ones are applied",
        evidence={"loss_scale": scale, "optimizer": optimizer, "gradients": "scaled"},
    )


def unscaled_stepped(optimizer: str, scale: float) -> Finding:
    return Finding(
        "gradients-off-by-loss-scale",
        "error",
        f"scaler.step({optimizer}) divided by the loss scale ({scale:,.0f}) gradients whose "
        "loss was never multiplied by it: the backward ran on the loss itself, not on "
        f"scaler.scale(loss), so the optimiser stepped with gradients {scale:,.0f} times too "
        "small",
        evidence={"loss_scale": scale, "optimizer": optimizer, "gradients": "not scaled"},
    )

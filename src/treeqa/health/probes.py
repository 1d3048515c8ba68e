"""One trained parameter watched from a sampled step's first forward to its optimiser's step:
did each backward that added into its ``.grad`` find it cleared?

``Updates`` keeps a probe on the last parameter with a gradient of the models the clock
trains, one on a parameter the clock's optimiser holds outside those models (a learnable
temperature that ``model.zero_grad()`` never reaches), and one for each other optimiser that
steps (a GAN's generator). Each ``finish`` gives its step's verdicts:

- ``gradients-not-zeroed``: no backward of the step started from a cleared gradient, on
  ``checks`` streak of sampled steps in a row;
  a step with no backward that accumulates into ``.grad``, whose gradients the script took
  with ``torch.autograd.grad`` and set by hand, counts as clean unless no call of it found
  the gradient cleared and the gradient the step took is the one the last call found plus
  a multiple of the one it returned (``p.grad = p.grad + g / k``, ``p.grad += g``): a fresh
  ``p.grad = g`` each step is no carry-over, though it finds the last one there;
- ``zero-grad-per-micro-batch``: every one of two or more backwards did, the parameter
  unchanged between them, and the step took the last one's gradient as it was left.

The two hooks cost one host sync per backward of a sampled step (and two dot products on the
device when the gradient is not cleared), and nothing otherwise.

FSDP's parameters are not the ones the backward reaches (``fully_shard``'s ``DTensor``
parameters are not in the graph; ``FullyShardedDataParallel`` moves its flat parameter's
gradient aside before each backward and adds it back after): a probe on one takes no hook, and
is told of each backward as it is called and as it returns instead (``backward_called``,
``backward_returned``), reading the gradient the optimiser steps, this process's part of it,
at both (one host sync per backward of a sampled step). A backward that left it as it was
(FSDP2's micro-batches under ``set_requires_gradient_sync(False)`` hold their gradients
apart, in the whole weights) did not add into it.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from treeqa.health import slips
from treeqa.health.findings import Finding
from treeqa.health.processes import is_dtensor, local_part

Taken = tuple[bool, torch.Tensor | None, torch.Tensor]
"""A hook call's: the gradient was cleared; for the one there (None if cleared), its squared
norm and its dot product with the gradient the call brought; that gradient."""
PARALLEL = 0.98
"""Squared cosine above which the gradient found and the one brought are too near parallel
to tell one added to the other from one replaced by a multiple of the other."""


class Probe:
    """``param``: the parameter; ``whose``: what it is, for the message ("" for the model's
    own, e.g. "a parameter outside the model"); ``by_hand``: updated by the script's hand, not
    by an optimiser."""

    def __init__(self, param: torch.Tensor, whose: str = "", by_hand: bool = False):
        self.param, self.whose, self.by_hand = param, whose, by_hand
        self.at_backward = _fsdp_parameter(param)  # read at each backward's call and return
        self.armed = False
        self.clean: list[bool] = []  # per finished step: a backward started from cleared grads
        # per finished step with 2+ backwards: all started clean, nothing changed in between
        self.discarded: list[bool] = []
        self.last_discarded: bool | None = None  # the last finished step's (2+ backwards)
        self._handles: list[Any] = []
        self._before: bool | None = None  # the gradient was clear before this backward
        self._backwards: list[tuple[bool, int]] = []  # this step's: (clean, param's version)
        self._last_grad: torch.Tensor | None = None  # the .grad the last backward left
        self._last_version = 0  # and its (part's) version as it left it
        # the last hook call's (a call with no accumulation after it was torch.autograd.grad's)
        self._taken: Taken | None = None
        self._last_taken: Taken | None = None  # the step's last torch.autograd.grad call's
        self._by_grad: list[bool] = []  # this step's torch.autograd.grad calls: cleared before
        # (a probe ``at_backward``) the backward being run found: the gradient cleared; the
        # gradient (None if there was none) and its part's version, to tell if it added into it
        self._found: tuple[bool, weakref.ref[torch.Tensor] | None, int] | None = None
        # the largest magnitude of the gradient the step's last backward brought, on the device
        # (0: the backward gave zeros, which nothing cleared after it)
        self.brought: torch.Tensor | None = None

    def arm(self) -> None:
        """A sampled step's compute starts: watch the backwards until ``finish`` (not a
        parameter frozen since it was chosen: it takes no hook, and has no gradient to judge)."""
        if self.armed or not self.param.requires_grad:
            return
        self.armed = True
        self._backwards, self._last_grad = [], None
        self._taken, self._by_grad, self._last_taken = None, [], None
        self._found, self.brought = None, None
        if self.at_backward:
            return
        self._handles = [
            self.param.register_hook(self._before_accumulate),
            self.param.register_post_accumulate_grad_hook(self._accumulated),
        ]

    def restart(self) -> None:
        """Another optimiser stepped inside the window: the backwards so far were its step's
        (block-coordinate descent: two optimisers over halves of one model stepping in turn,
        ``model.zero_grad()`` before each backward), not micro-batches of the clock's."""
        self._backwards, self._by_grad = [], []
        self._taken = self._last_taken = None

    def disarm(self) -> None:
        while self._handles:
            self._handles.pop().remove()
        self.armed = False
        self._last_grad = self._taken = self._last_taken = self._found = None

    def backward_called(self) -> None:
        """A backward is about to run (a probe ``at_backward``): is the gradient cleared? Not
        judged where this process holds none of the parameter (more processes than rows)."""
        grad = self.param.grad
        if grad is None:
            self._found = (True, None, 0)
            return
        part = local_part(grad)
        if part.numel() == 0:
            self._found = None
            return
        cleared = not self._left_as_it_was(grad) and not bool(part.any())  # one host sync
        self._found = (cleared, weakref.ref(grad), part._version)

    def backward_returned(self) -> None:
        """The backward has returned: it added into the gradient if it left a new tensor there
        or changed the one it found (FSDP2 adds into its part in place)."""
        if self._found is None:
            return
        cleared, before, version = self._found
        self._found = None
        grad = self.param.grad
        if grad is None:
            return
        if before is not None and before() is grad and local_part(grad)._version == version:
            return
        self._backwards.append((cleared, self.param._version))
        self._left(grad)

    def _left(self, grad: torch.Tensor | None) -> None:
        """A backward of the step added into the gradient and left ``grad``."""
        self._last_grad = grad
        self._last_version = 0 if grad is None else local_part(grad)._version

    def _left_as_it_was(self, grad: torch.Tensor | None) -> bool:
        """``grad`` is the tensor the step's last backward left, untouched since: not cleared,
        even where it is all zeros (a dead or diverged model's gradient is zero everywhere,
        and a zero gradient carried over is not one cleared)."""
        return (
            grad is not None
            and grad is self._last_grad
            and local_part(grad)._version == self._last_version
        )

    def _before_accumulate(self, grad: torch.Tensor) -> None:
        self._settle_taken()
        self.brought = grad.detach().abs().amax() if grad.layout == torch.strided else None
        g = self.param.grad
        kept = self._left_as_it_was(g)
        if g is not None and g.is_sparse:
            g = g.coalesce().values()
        if g is None or (not kept and not bool(g.any())):  # one host sync
            self._before, self._taken = True, (True, None, grad)
        elif grad.is_sparse or grad.is_complex() or g.shape != grad.shape:
            # (not judged by hand: float() of a complex gradient drops its imaginary part, and
            # says so in a warning on the script's output)
            self._before, self._taken = False, (False, None, grad)
        else:  # (no host sync: read at the step, if no backward accumulates)
            found, brought = g.detach().float().flatten(), grad.detach().float().flatten()
            sums = torch.stack([found.dot(found), found.dot(brought)])
            self._before, self._taken = False, (False, sums, grad)

    def _settle_taken(self) -> None:
        """The last hook call had no accumulation after it: torch.autograd.grad's."""
        if self._taken is not None:
            self._by_grad.append(self._taken[0])
            self._last_taken, self._taken = self._taken, None

    def _accumulated(self, param: torch.Tensor) -> None:
        # Only a backward accumulates into .grad: torch.autograd.grad runs the first hook
        # too but leaves .grad alone (to the script's hand: see ``_added_by_hand``).
        if self._before is not None:
            # The version moves when the parameter changes in place (SAM's ascent step).
            self._backwards.append((self._before, param._version))
            self._left(param.grad)
            self._before = self._taken = None

    def finish(self) -> list[Finding]:
        """The optimiser stepped: the step's verdicts, and the findings they make."""
        if not self.armed:
            return []
        backwards = self._backwards
        found = []
        self._settle_taken()
        if backwards or self._by_grad:
            clean = any(c for c, _ in backwards) if backwards else not self._added_by_hand()
            self.clean.append(clean)
            found.append(slips.gradients_not_zeroed(self.clean, self.whose, self.by_hand))
        self.last_discarded = None
        if len(backwards) >= 2:
            self.last_discarded = self._all_but_the_last_discarded()
            self.discarded.append(self.last_discarded)
            found.append(slips.zero_grad_per_micro_batch(self.discarded, len(backwards)))
        self.disarm()
        return [f for f in found if f is not None]

    def _added_by_hand(self) -> bool:
        """No torch.autograd.grad call of the step found the gradient cleared, and the one the
        step took is (to 1% in squared norm) the one the last call found plus a multiple c of
        the one it returned; c is read off their dot products. A multiple of the returned one
        alone (a fresh ``p.grad = g``) leaves a rest of cos^2 times the one found, which is
        within 1% of it only where cos^2 >= 0.99 (above PARALLEL: not judged)."""
        grad = self.param.grad
        if any(self._by_grad) or self._last_taken is None or grad is None:
            return False
        _, sums, returned = self._last_taken
        if sums is None or grad.is_sparse or grad.shape != returned.shape:
            return False
        found2, found_dot = sums
        took, brought = grad.detach().float().flatten(), returned.detach().float().flatten()
        brought2 = brought.dot(brought)
        rest = took - (took.dot(brought) - found_dot) / brought2 * brought
        added = (rest.dot(rest) - found2).abs() <= 0.01 * found2
        apart = found_dot.square() < PARALLEL * found2 * brought2
        return bool(added & apart & (brought2 > 0))  # one host sync

    def _all_but_the_last_discarded(self) -> bool:
        """Every backward of the step started from cleared gradients, with the parameter as it
        was, and the step took the last one's gradient as it left it (not a gradient combined
        and set by hand, as PCGrad sets one from per-task backwards)."""
        versions = {version for _, version in self._backwards}
        clean = all(clean for clean, _ in self._backwards)
        grad = self.param.grad
        return clean and len(versions) == 1 and grad is not None and grad is self._last_grad


def _fsdp_parameter(param: torch.Tensor) -> bool:
    """FSDP's: ``FullyShardedDataParallel``'s flat parameter, or a ``DTensor`` (the parameters
    ``fully_shard`` makes)."""
    return bool(getattr(param, "_is_flat_param", False)) or is_dtensor(param)

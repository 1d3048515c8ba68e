"""One trained parameter watched from a sampled step's first forward to its optimiser's step:
did each backward that added into its ``.grad`` find it cleared?

``Updates`` keeps a probe on the last parameter with a gradient of the models the clock
trains, one on a parameter the clock's optimiser holds outside those models (a learnable
temperature that ``model.zero_grad()`` never reaches), and one for each other optimiser that
steps (a GAN's generator). Each ``finish`` gives its step's verdicts:

- ``gradients-not-zeroed``: no backward of the step started from a cleared gradient, on
  ``checks`` streak of sampled steps in a row;
- ``zero-grad-per-micro-batch``: every one of two or more backwards did, the parameter
  unchanged between them, and the step took the last one's gradient as it was left.

The two hooks cost one host sync per backward of a sampled step, and nothing otherwise.
"""

from __future__ import annotations

from typing import Any

import torch

from treeqa.health import slips
from treeqa.health.findings import Finding


class Probe:
    """``param``: the parameter; ``whose``: what it is, for the message ("" for the model's
    own, e.g. "a parameter outside the model"); ``by_hand``: updated by the script's hand, not
    by an optimiser."""

    def __init__(self, param: torch.Tensor, whose: str = "", by_hand: bool = False):
        self.param, self.whose, self.by_hand = param, whose, by_hand
        self.clean: list[bool] = []  # per finished step: a backward started from cleared grads
        # per finished step with 2+ backwards: all started clean, nothing changed in between
        self.discarded: list[bool] = []
        self._handles: list[Any] = []
        self._before: bool | None = None  # the gradient was clear before this backward
        self._backwards: list[tuple[bool, int]] = []  # this step's: (clean, param's version)
        self._last_grad: torch.Tensor | None = None  # the .grad the last backward left

    def arm(self) -> None:
        """A sampled step's compute starts: watch the backwards until ``finish`` (not a
        parameter frozen since it was chosen: it takes no hook, and has no gradient to judge)."""
        if self._handles or not self.param.requires_grad:
            return
        self._backwards, self._last_grad = [], None
        self._handles = [
            self.param.register_hook(self._before_accumulate),
            self.param.register_post_accumulate_grad_hook(self._accumulated),
        ]

    def disarm(self) -> None:
        while self._handles:
            self._handles.pop().remove()
        self._last_grad = None

    def _before_accumulate(self, grad: torch.Tensor) -> None:
        g = self.param.grad
        if g is not None and g.is_sparse:
            g = g.coalesce().values()
        self._before = g is None or not bool(g.any())  # one host sync

    def _accumulated(self, param: torch.Tensor) -> None:
        # Only a backward that accumulates into .grad counts: torch.autograd.grad runs the
        # first hook too but leaves .grad alone (a gradient set by hand is no carry-over).
        if self._before is not None:
            # The version moves when the parameter changes in place (SAM's ascent step).
            self._backwards.append((self._before, param._version))
            self._last_grad = param.grad
            self._before = None

    def finish(self) -> list[Finding]:
        """The optimiser stepped: the step's verdicts, and the findings they make."""
        if not self._handles:
            return []
        backwards = self._backwards
        found = []
        if backwards:
            self.clean.append(any(clean for clean, _ in backwards))
            found.append(slips.gradients_not_zeroed(self.clean, self.whose, self.by_hand))
        if len(backwards) >= 2:
            self.discarded.append(self._all_but_the_last_discarded())
            found.append(slips.zero_grad_per_micro_batch(self.discarded, len(backwards)))
        self.disarm()
        return [f for f in found if f is not None]

    def _all_but_the_last_discarded(self) -> bool:
        """Every backward of the step started from cleared gradients, with the parameter as it
        was, and the step took the last one's gradient as it left it (not a gradient combined
        and set by hand, as PCGrad sets one from per-task backwards)."""
        versions = {version for _, version in self._backwards}
        clean = all(clean for clean, _ in self._backwards)
        grad = self.param.grad
        return clean and len(versions) == 1 and grad is not None and grad is self._last_grad

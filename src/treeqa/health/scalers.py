"""The fp16 loss scalers a run steps with, so an overflow they skip is not taken for a NaN.

Under fp16 autocast, ``GradScaler`` multiplies the loss by a large scale; a step whose
gradients overflow to Inf/NaN is skipped and the scale halves. Such gradients are expected
(the first steps of most fp16 runs have them), so the monitor judges non-finite gradients by
the scale instead: while it stays at or above ``MIN_SCALE`` the scaler is handling overflows;
below it, the gradients have been non-finite at every scale tried, which no overflow explains.
Scalers are noted when they scale a loss (``GradScaler.scale`` is wrapped for the run: one
set insertion a step, no device sync); their scale is read only on sampled steps whose gradients
are non-finite.

A loss can also be scaled without a ``GradScaler``: by hand (``(loss * 1024).backward()``, the
gradients divided before the step), or by another library's scaler, which multiplies the loss
the same way. ``scale_by_hand`` reads that factor off the loss's autograd graph.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.amp import GradScaler

from treeqa.health import loss_inputs
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_calls_and_results

HAND_SCALE = 8.0
"""A constant the loss is multiplied by before its backward from which it reads as a loss scale
(static scales are powers of two from 128 up; a loss weight of 0.5 or 2 is not one)."""
MIN_SCALE = 1.0
"""A loss scale below this (from 65,536, at least 17 halvings more than doublings): the
gradients are non-finite whatever the scale, a NaN or Inf of the model's own."""


class LossScalers:
    """The enabled ``GradScaler``\\ s that scaled a loss while installed."""

    def __init__(self) -> None:
        self.seen: weakref.WeakSet[GradScaler] = weakref.WeakSet()
        self.wrappers = Wrappers()
        self.by_hand = False  # a backward's loss was multiplied by HAND_SCALE or more
        # Told each scaled loss: ``(scaler, what scale returned)`` (``scaled_steps.py``).
        self.on_scaled: list[Callable[[GradScaler, Any], None]] = []

    def install(self) -> None:
        self.wrappers.add(note_calls_and_results(GradScaler, "scale", self._note, self._scaled))

    def uninstall(self) -> None:
        self.wrappers.undo()

    def _note(self, scaler: GradScaler, *_: Any, **__: Any) -> None:
        if scaler.is_enabled():
            self.seen.add(scaler)

    def _scaled(self, scaler: GradScaler, output: Any) -> None:
        for told in self.on_scaled:
            told(scaler, output)

    def enabled(self) -> list[GradScaler]:
        """The scalers in use (one disabled later in the run no longer counts)."""
        return [s for s in list(self.seen) if s.is_enabled()]

    def scaled(self) -> bool:
        """A loss is scaled: by a ``GradScaler`` in use, or by hand (``note_backward``)."""
        return self.by_hand or bool(self.enabled())

    def note_backward(self, loss: torch.Tensor, gradient: Any) -> None:
        """A backward of ``loss`` from ``gradient`` is about to run (read on sampled steps
        until a scaled one is seen: one host sync per constant read)."""
        if not self.by_hand:
            self.by_hand = scale_by_hand(loss, gradient) >= HAND_SCALE

    def scale(self) -> float | None:
        """The smallest scale of the scalers in use (one device sync each); None: no scaler."""
        return min((s.get_scale() for s in self.enabled()), default=None)

    def collapsed(self, step: int) -> Finding | None:
        """``non-finite`` when a scaler's scale is below ``MIN_SCALE`` (read at the run's end,
        so a short run whose sampled steps came too early is judged too)."""
        scale = self.scale()
        if scale is None or scale >= MIN_SCALE:
            return None
        return Finding(
            "non-finite",
            "error",
            f"the fp16 loss scale fell to {scale:.3g}: the gradients were non-finite at every "
            "scale tried, so the loss scaler skipped the steps (a NaN or Inf, not an overflow)",
            where="GradScaler",
            evidence={"loss_scale": scale},
            step=step,
        )


def scale_by_hand(loss: torch.Tensor, gradient: Any = None, hops: int = 6) -> float:
    """The constant ``loss`` was multiplied by before its backward: the product of the
    one-element factors without gradients it was multiplied (or divided) by in its last
    ``hops`` nodes, times a one-element ``gradient`` handed to the backward. 1.0 for a loss
    used as it is. A host sync per factor read."""
    factor = 1.0
    if isinstance(gradient, torch.Tensor) and gradient.numel() == 1:
        factor = float(gradient)
    node: Any = loss.grad_fn
    for _ in range(hops):
        name = type(node).__name__
        if name in ("MulBackward0", "DivBackward0"):
            constant = _constant_factor(node, name == "MulBackward0")
            if constant is None:
                break
            factor = factor * constant if name == "MulBackward0" else factor / constant
        elif not loss_inputs.VIEWS.fullmatch(name):  # a cast (.float()), a view: passed
            break
        inputs = [f for f, _ in node.next_functions if f is not None]
        if len(inputs) != 1:
            break
        node = inputs[0]
    return abs(factor)


def _constant_factor(node: Any, commutes: bool) -> float | None:
    """The one-element factor without gradients of a ``Mul``/``Div`` node whose other side
    has them; None when both sides have gradients or the factor is a whole tensor."""
    try:
        other, this = node._saved_other, node._saved_self
    except (AttributeError, RuntimeError):  # freed, or another torch's internals
        return None
    # Each side is saved for the other side's gradient, so the side without gradients is the
    # one saved alone (a division saves its numerator only when the denominator has them).
    constant = other if this is None else (this if other is None and commutes else None)
    if not isinstance(constant, torch.Tensor) or constant.numel() != 1:
        return None
    value = float(constant)
    return value if value != 0 else None

"""The fp16 loss scalers a run steps with, so an overflow they skip is not taken for a NaN.

Under fp16 autocast, ``GradScaler`` multiplies the loss by a large scale; a step whose
gradients overflow to Inf/NaN is skipped and the scale halves. Such gradients are expected
(the first steps of most fp16 runs have them), so the monitor judges non-finite gradients by
the scale instead: while it stays at or above ``MIN_SCALE`` the scaler is handling overflows;
below it, the gradients have been non-finite at every scale tried, which no overflow explains.
Scalers are noted when they scale a loss (``GradScaler.scale`` is wrapped for the run: one
set insertion a step, no device sync); their scale is read only on sampled steps whose gradients
are non-finite.
"""

from __future__ import annotations

import weakref

from torch.amp import GradScaler

from treeqa.health.checks import Finding
from treeqa.health.wrap import Wrappers, note_calls

MIN_SCALE = 1.0
"""A loss scale below this (from 65,536, at least 17 halvings more than doublings): the
gradients are non-finite whatever the scale, a NaN or Inf of the model's own."""


class LossScalers:
    """The enabled ``GradScaler``\\ s that scaled a loss while installed."""

    def __init__(self) -> None:
        self.seen: weakref.WeakSet[GradScaler] = weakref.WeakSet()
        self.wrappers = Wrappers()

    def install(self) -> None:
        self.wrappers.add(note_calls(GradScaler, "scale", self._note))

    def uninstall(self) -> None:
        self.wrappers.undo()

    def _note(self, scaler: GradScaler) -> None:
        if scaler.is_enabled():
            self.seen.add(scaler)

    def enabled(self) -> list[GradScaler]:
        """The scalers in use (one disabled later in the run no longer counts)."""
        return [s for s in list(self.seen) if s.is_enabled()]

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

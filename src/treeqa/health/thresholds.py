"""``threshold-off-scale``: a binary or multi-label model's predictions read off its output on
the wrong scale. A model trained under ``binary_cross_entropy_with_logits`` outputs logits, and
``torch.round(out)`` or ``out > 0.5`` reads them as probabilities (a logit of 2.3 rounds to 2,
no class; a logit threshold of 0.5 is a probability of 0.62); a model ending in a sigmoid,
trained under ``binary_cross_entropy``, outputs probabilities, and ``out > 0`` or
``torch.sigmoid(out) > 0.5`` (a second sigmoid, between 0.5 and 0.73) is true of every value.

The training loss tells the scale: on sampled steps, the input of either loss that is the
model's output (its memory: ``out.squeeze(1)`` too) marks that output (its place among the
forward's tensors) as logits or as probabilities. In the windows ``Predictions`` opens after a
trained model's forward, comparisons with a number (``>``, ``>=``, ``<``, ``<=``, ``gt``...),
``round`` and ``sigmoid`` are wrapped once a scale is known. A comparison of logits with a
number strictly between 0 and 1, a ``round`` of logits, a comparison of probabilities with 0 or
less, and one of a sigmoid of probabilities with a number between 0 and 1 are read (one host
read): the share of values the read-out puts on the other side from the right one (logits at
0, probabilities at 0.5); some make the finding, at the script's line.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_function_calls, note_function_results

LOSSES = {
    "F.binary_cross_entropy_with_logits": "logits",
    "F.binary_cross_entropy": "probabilities",
}
"""The training losses that tell an output's scale, by the name the loss checks give them."""
COMPARISONS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
"""Tensor methods (and ``torch.X``, and ``__X__``) that compare with a threshold."""
SQUASHED_HALF = 1 / (1 + math.exp(-0.5))
"""sigmoid(0.5): a second sigmoid's value for a probability of 0.5."""


class Thresholds:
    """``add``: where findings go. ``window(outputs, training)`` after a trained model's
    forward (its output tensors, in order), ``close()`` when that window ends, and
    ``loss_input(input, name)`` for a sampled step's loss input."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.said = False
        self.scales: dict[int, str] = {}  # an output's place -> "logits" or "probabilities"
        self.outputs: list[weakref.ref[torch.Tensor]] = []  # this window's output tensors
        self.squashed: list[weakref.ref[torch.Tensor]] = []  # sigmoids of probabilities
        self.open = False  # a window is open
        self.wrappers = Wrappers()

    def window(self, outputs: list[torch.Tensor]) -> None:
        """A trained model's forward returned ``outputs``: what reads them until its next."""
        if self.said:
            return
        self.outputs = [weakref.ref(t) for t in outputs]
        self.open = True
        if self.scales:
            self._wrap()

    def close(self) -> None:
        self.open = False
        self.outputs, self.squashed = [], []
        self.wrappers.undo()

    def loss_input(self, input: Any, name: str) -> None:
        """A sampled step's loss ``name`` was given ``input``: a training loss of the model's
        output tells that output's scale."""
        kind = LOSSES.get(name)
        if kind is None or self.said or not isinstance(input, torch.Tensor):
            return
        if not input.requires_grad:
            return
        for place, ref in enumerate(self.outputs):
            output = ref()
            if output is not None and _same_memory(input, output):
                self.scales.setdefault(place, kind)
                if self.open:
                    self._wrap()
                return

    def _wrap(self) -> None:
        if self.wrappers:
            return
        for name in COMPARISONS:
            for owner, attribute in ((torch.Tensor, name), (torch.Tensor, f"__{name}__")):
                self.wrappers.add(note_function_calls(owner, attribute, self._compared, name))
            self.wrappers.add(note_function_calls(torch, name, self._compared))
        self.wrappers.add(note_function_calls(torch, "round", self._rounded))
        self.wrappers.add(note_function_calls(torch.Tensor, "round", self._rounded))
        self.wrappers.add(note_function_results(torch, "sigmoid", self._squashed))
        self.wrappers.add(note_function_results(torch.Tensor, "sigmoid", self._squashed))

    def _scale(self, x: Any) -> str | None:
        """The scale of ``x``: that of the output it is (a view of), or ``"squashed"``."""
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            return None
        for ref in self.squashed:
            s = ref()
            if s is not None and _same_memory(x, s):
                return "squashed"
        for place, ref in enumerate(self.outputs):
            output = ref()
            if place in self.scales and output is not None and _same_memory(x, output):
                return self.scales[place]
        return None

    def _squashed(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], y: Any) -> None:
        """``torch.sigmoid(x)`` returned ``y``: of probabilities, a second sigmoid."""
        x = args[0] if args else kwargs.get("input")
        if isinstance(y, torch.Tensor) and self._scale(x) == "probabilities":
            self.squashed.append(weakref.ref(y))

    def _rounded(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = args[0] if args else kwargs.get("input")
        scale = self._scale(x)
        if scale not in ("logits", "squashed") or kwargs.get("decimals", 0) != 0:
            return
        assert isinstance(x, torch.Tensor)
        x = x.detach()
        rounded = torch.ops.aten.round.default(x)
        if scale == "logits":
            off = (rounded != _above(x, 0).to(x.dtype)).float().mean()
            what = (
                "torch.round of the model's raw logits (it trains under "
                "binary_cross_entropy_with_logits): a logit of 2.3 rounds to 2 and one of -1.2 "
                "to -1, neither a class, and one of 0.3 to 0, a negative where its probability "
                "is 0.57"
            )
        else:
            off = (rounded != _above(x, SQUASHED_HALF).to(x.dtype)).float().mean()
            what = (
                "torch.round of a sigmoid of the model's output, which is already a "
                "probability (it ends in a sigmoid: it trains under binary_cross_entropy): a "
                "second sigmoid puts every value between 0.5 and 0.73, and every one rounds to 1"
            )
        self._say(float(off), what, "round" if scale == "logits" else "round(sigmoid(out))")

    def _compared(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``x > t`` (``x.gt(t)``, ``torch.gt(x, t)``...) ran in the window."""
        if len(args) < 2:
            return
        x, t = args[0], args[1]
        if isinstance(t, torch.Tensor) and t.dim() == 0 and not isinstance(x, torch.Tensor):
            return
        threshold = _number(t)
        scale = self._scale(x) if threshold is not None else None
        if scale is None or threshold is None:
            return
        assert isinstance(x, torch.Tensor)
        x = x.detach()
        read = f"out {COMPARISONS[name]} {threshold:g}"
        if scale == "logits" and 0 < threshold < 1:
            off = (_above(x, 0) != _above(x, threshold)).float().mean()
            self._say(
                float(off),
                f"predictions read as `{read}` of the model's raw logits (it trains under "
                f"binary_cross_entropy_with_logits): {threshold:g} is a probability's "
                f"threshold, on logits the probability {1 / (1 + math.exp(-threshold)):.2f}; "
                f"the values between 0 and {threshold:g} are read as the other class",
                read,
            )
        elif scale == "probabilities" and threshold <= 0:
            off = (_above(x, threshold) != _above(x, 0.5)).float().mean()
            self._say(
                float(off),
                f"predictions read as `{read}` of probabilities (the model's output is a "
                "sigmoid's: it trains under binary_cross_entropy): every probability is above "
                "0, so every prediction is the same class",
                read,
            )
        elif scale == "squashed" and 0 < threshold < 1:
            off = (_above(x, threshold) != _above(x, SQUASHED_HALF)).float().mean()
            self._say(
                float(off),
                f"predictions read as `sigmoid(out) {COMPARISONS[name]} {threshold:g}` where the "
                "model's output is already a probability (it ends in a sigmoid: it trains "
                "under binary_cross_entropy): a second sigmoid puts every value between 0.5 "
                "and 0.73",
                f"sigmoid(out) {COMPARISONS[name]} {threshold:g}",
            )

    def _say(self, off: float, what: str, read: str) -> None:
        if off <= 0 or self.said:  # (no value read wrongly here: no harm yet)
            return
        self.said = True
        self.close()
        self.add(
            Finding(
                "threshold-off-scale",
                "error",
                f"{what}: {off:.0%} of the values here are read as the other class from what "
                "the model predicts (a logit above 0, a probability above 0.5)",
                where=sites.user_site(),
                evidence={"read": read, "share_misread": round(off, 4)},
            )
        )


def _above(x: torch.Tensor, t: float) -> torch.Tensor:
    """``x > t``, past the wrappers (which would read it again)."""
    return torch.ops.aten.gt.Scalar(x, t)


def _number(t: Any) -> float | None:
    """A threshold: a Python number, or a tensor of one value."""
    if isinstance(t, bool):
        return None
    if isinstance(t, int | float):
        return float(t)
    if isinstance(t, torch.Tensor) and t.numel() == 1 and t.is_floating_point():
        return float(t)
    return None


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are views of one tensor's memory."""
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # (a tensor without storage)
        return False

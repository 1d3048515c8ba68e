"""``threshold-off-scale``: a binary or multi-label model's predictions read off its output on
the wrong scale. A model trained under ``binary_cross_entropy_with_logits`` outputs logits, and
``torch.round(out)`` or ``out > 0.5`` reads them as probabilities (a logit of 2.3 rounds to 2,
no class; a logit threshold of 0.5 is a probability of 0.62); a model ending in a sigmoid,
trained under ``binary_cross_entropy``, outputs probabilities, and ``out > 0`` or
``torch.sigmoid(out) > 0.5`` (a second sigmoid, between 0.5 and 0.73) is true of every value.

The training loss tells the scale, per model: on sampled steps, the input of either loss that
is one of the model's output tensors (its memory: ``out.squeeze(1)`` too) marks that output
(its place among the forward's tensors) as logits or as probabilities; so does a
``binary_cross_entropy`` of a sigmoid taken of the output in the loop (logits). In the windows
``Predictions`` opens after a trained model's forward, comparisons with a number (``>``,
``>=``, ``<``, ``<=``, ``gt``...), ``round``, ``sigmoid`` and ``cat`` are wrapped once a scale
is known: the outputs of an evaluation's forwards, joined by ``torch.cat``, keep their scale.
Read (one host read each): logits compared with a short decimal strictly between 0 and 1 (0.5,
0.3: a probability's threshold, written by hand) where some values lie outside [0, 1] (a model
that returns its sigmoid in eval mode gives probabilities there), a ``round`` of such logits,
probabilities compared by ``>`` with 0 or less, and a comparison or ``round`` of a sigmoid of
probabilities: the share of values the read-out puts on the other side from the right one
(logits at 0, probabilities at 0.5). Where some are, the read is held to the window's end, and
dropped if the same window compared the logits with the negated threshold too (a margin,
``(out > 0.5) | (out < -0.5)``); else it makes the finding, at the script's line.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.relabelled import memory_of
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
VIEWS = 4
"""View nodes walked back from a sigmoid given to a loss, to the output it was taken of."""
JOINED = 4096
"""An evaluation's outputs kept (weakly) to follow into ``torch.cat``, at most."""


class Thresholds:
    """``add``: where findings go. ``window(outputs, model, evaluation)`` after a trained
    model's forward (its output tensors, in order), ``close()`` when that window ends, and
    ``loss_input(input, name)`` for a sampled step's loss input."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.said = False
        self.scales: dict[tuple[int, int], str] = {}  # (model, place) -> its scale
        self.model = 0  # the window's model (its id)
        self.outputs: list[weakref.ref[torch.Tensor]] = []  # this window's output tensors
        # tensors whose scale is known, by their memory: an evaluation's outputs so far, their
        # joins, sigmoids of probabilities ("squashed")
        self.known: dict[int, tuple[weakref.ref[torch.Tensor], str]] = {}
        self.pending: list[tuple[float, float, str, str, str]] = []  # (t, off, what, read, where)
        self.margins: set[float] = set()  # negative thresholds the logits met, negated
        self.open = False  # a window is open
        self.wrappers = Wrappers()

    def window(self, outputs: list[torch.Tensor], model: int, evaluation: bool) -> None:
        """A trained model's forward returned ``outputs``: what reads them until its next."""
        if self.said:
            return
        if not evaluation or len(self.known) >= JOINED:
            self.known = {}
        self.model, self.outputs, self.open = model, [weakref.ref(t) for t in outputs], True
        for place, t in enumerate(outputs):
            scale = self.scales.get((model, place))
            if scale is not None:
                self._know(t, scale)
                self._wrap()

    def close(self) -> None:
        """The window ends (the model's next forward, or the run's end): its reads judged."""
        pending = [p for p in self.pending if round(p[0], 6) not in self.margins]
        self.open, self.outputs, self.pending, self.margins = False, [], [], set()
        self.wrappers.undo()
        if pending and not self.said:
            self._say(*pending[0][1:])

    def loss_input(self, input: Any, name: str) -> None:
        """A sampled step's loss ``name`` was given ``input``: a training loss of the model's
        output tells that output's scale."""
        kind = LOSSES.get(name)
        if kind is None or self.said or not isinstance(input, torch.Tensor):
            return
        if not input.requires_grad:
            return
        node = _sigmoid_of(input) if kind == "probabilities" else None
        for place, ref in enumerate(self.outputs):
            output = ref()
            if output is None:
                continue
            if same_memory(input, output):
                self._learnt(place, output, kind)
                return
            if node is not None and output.grad_fn is not None and output.grad_fn in node:
                self._learnt(place, output, "logits")  # (the loop took their sigmoid)
                return

    def _learnt(self, place: int, output: torch.Tensor, kind: str) -> None:
        kind = self.scales.setdefault((self.model, place), kind)
        self._know(output, kind)
        if self.open:
            self._wrap()

    def _know(self, t: torch.Tensor, scale: str) -> None:
        """``t`` (and its views) has ``scale``; one without memory to read is not kept."""
        memory = memory_of(t)
        if memory:
            self.known[memory] = (weakref.ref(t), scale)

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
        self.wrappers.add(note_function_results(torch, "cat", self._joined))

    def _scale(self, x: Any) -> str | None:
        """The scale of ``x``: that of the output it is (a view of), of a join of such
        outputs, or ``"squashed"``: a sigmoid of probabilities."""
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            return None
        known = self.known.get(memory_of(x))
        if known is None or known[0]() is None:
            return None
        return known[1]

    def _squashed(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], y: Any) -> None:
        """``torch.sigmoid(x)`` returned ``y``: of probabilities, a second sigmoid."""
        x = args[0] if args else kwargs.get("input")
        if isinstance(y, torch.Tensor) and self._scale(x) == "probabilities":
            self._know(y, "squashed")

    def _joined(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], y: Any) -> None:
        """``torch.cat(tensors)`` returned ``y``: outputs joined keep their scale."""
        tensors = args[0] if args else kwargs.get("tensors", ())
        if not isinstance(y, torch.Tensor) or not isinstance(tensors, list | tuple):
            return
        scales = {self._scale(t) for t in tensors}
        scale = scales.pop() if len(scales) == 1 else None
        if scale is not None:
            self._know(y, scale)

    def _rounded(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = args[0] if args else kwargs.get("input")
        scale = self._scale(x)
        if scale not in ("logits", "squashed") or kwargs.get("decimals", 0) != 0:
            return
        assert isinstance(x, torch.Tensor)
        x = x.detach()
        rounded = torch.ops.aten.round.default(x)
        if scale == "logits":
            off, outside = _read(rounded != _above(x, 0).to(x.dtype), x)
            if outside:  # (values all in [0, 1]: probabilities, a sigmoid in eval mode)
                what = (
                    "torch.round of the model's raw logits (it trains under "
                    "binary_cross_entropy_with_logits): a logit of 2.3 rounds to 2 and one of "
                    "-1.2 to -1, neither a class, and one of 0.3 to 0, a negative where its "
                    "probability is 0.57"
                )
                self._hold(0.5, off, what, "round")
        else:
            off, _ = _read(rounded != _above(x, SQUASHED_HALF).to(x.dtype), x)
            what = (
                "torch.round of a sigmoid of the model's output, which is already a "
                "probability (it ends in a sigmoid: it trains under binary_cross_entropy): a "
                "second sigmoid puts every value between 0.5 and 0.73, and every one rounds to 1"
            )
            self._hold(0.5, off, what, "round(sigmoid(out))")

    def _compared(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``x > t`` (``x.gt(t)``, ``torch.gt(x, t)``...) ran in the window."""
        if len(args) < 2:
            return
        x, t = args[0], args[1]
        threshold = _number(t) if isinstance(x, torch.Tensor) else None
        scale = self._scale(x) if threshold is not None else None
        if scale is None or threshold is None:
            return
        assert isinstance(x, torch.Tensor)
        x = x.detach()
        read = f"out {COMPARISONS[name]} {threshold:g}"
        if scale == "logits" and -1 < threshold < 0:
            self.margins.add(round(-threshold, 6))  # (a margin both ways, it may be)
        elif scale == "logits" and 0 < threshold < 1 and _by_hand(threshold):
            off, outside = _read(_above(x, 0) != _above(x, threshold), x)
            if outside:  # (values all in [0, 1]: probabilities, a sigmoid in eval mode)
                what = (
                    f"predictions read as `{read}` of the model's raw logits (it trains under "
                    f"binary_cross_entropy_with_logits): {threshold:g} is a probability's "
                    "threshold, on logits the probability "
                    f"{1 / (1 + math.exp(-threshold)):.2f}; the values between 0 and "
                    f"{threshold:g} are read as the other class"
                )
                self._hold(threshold, off, what, read)
        elif scale == "probabilities" and name == "gt" and threshold <= 0:
            off, _ = _read(_above(x, threshold) != _above(x, 0.5), x)
            what = (
                f"predictions read as `{read}` of probabilities (the model's output is a "
                "sigmoid's: it trains under binary_cross_entropy): every probability is above "
                "0, so every prediction is the same class"
            )
            self._hold(threshold, off, what, read)
        elif scale == "squashed" and 0 < threshold < 1:
            off, _ = _read(_above(x, threshold) != _above(x, SQUASHED_HALF), x)
            read = f"sigmoid(out) {COMPARISONS[name]} {threshold:g}"
            what = (
                f"predictions read as `{read}` where the model's output is already a "
                "probability (it ends in a sigmoid: it trains under binary_cross_entropy): a "
                "second sigmoid puts every value between 0.5 and 0.73"
            )
            self._hold(threshold, off, what, read)

    def _hold(self, threshold: float, off: float, what: str, read: str) -> None:
        """A read-out on the wrong scale that misread ``off`` of its values: judged when the
        window ends."""
        if off > 0 and not self.pending:  # (no value read wrongly here: no harm yet)
            self.pending.append((threshold, off, what, read, sites.user_site()))

    def _say(self, off: float, what: str, read: str, where: str) -> None:
        self.said = True
        self.known = {}
        self.add(
            Finding(
                "threshold-off-scale",
                "error",
                f"{what}: {off:.0%} of the values here are read as the other class from what "
                "the model predicts (a logit above 0, a probability above 0.5)",
                where=where,
                evidence={"read": read, "share_misread": round(off, 4)},
            )
        )


def _read(misread: torch.Tensor, x: torch.Tensor) -> tuple[float, bool]:
    """The share of values misread, and whether any of ``x`` lies outside [0, 1] (one host
    read)."""
    outside = torch.ops.aten.gt.Scalar(x, 1) | torch.ops.aten.lt.Scalar(x, 0)
    off, out = torch.stack([misread.float().mean(), outside.any().float()]).tolist()
    return off, out > 0


def _above(x: torch.Tensor, t: float) -> torch.Tensor:
    """``x > t``, past the wrappers (which would read it again)."""
    return torch.ops.aten.gt.Scalar(x, t)


def _by_hand(t: float) -> bool:
    """A threshold written as a short decimal (0.5, 0.3, 0.75), as a person writes a
    probability's; not a log-odds (log(0.6 / 0.4) = 0.405...), a logit's on purpose."""
    return abs(t * 100 - round(t * 100)) < 1e-4


def _sigmoid_of(loss_input: torch.Tensor) -> set[Any]:
    """The autograd nodes a sigmoid given to a loss was taken of (through a few views): none
    where the input is no sigmoid."""
    node = loss_input.grad_fn
    for _ in range(VIEWS):
        if node is None or type(node).__name__ == "SigmoidBackward0":
            break
        node = node.next_functions[0][0] if node.next_functions else None
    if node is None or type(node).__name__ != "SigmoidBackward0":
        return set()
    found, below = set(), node.next_functions[0][0] if node.next_functions else None
    for _ in range(VIEWS):
        if below is None:
            break
        found.add(below)
        below = below.next_functions[0][0] if below.next_functions else None
    return found


def _number(t: Any) -> float | None:
    """A threshold: a Python number, or a tensor of one value."""
    if isinstance(t, bool):
        return None
    if isinstance(t, int | float):
        return float(t)
    if isinstance(t, torch.Tensor) and t.numel() == 1 and t.is_floating_point():
        return float(t)
    return None


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are views of one tensor's memory."""
    memory = memory_of(a)
    return memory != 0 and memory == memory_of(b)

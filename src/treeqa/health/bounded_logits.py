"""``logits-bounded``: ``cross_entropy`` given logits that a bounded operation made and nothing
scaled up: cosine similarities (``F.normalize(h) @ F.normalize(W).T``, ``nn.CosineSimilarity``,
an InfoNCE or NT-Xent whose temperature is 1 or never divides), a margin head whose scale
defaults to 1, a CLIP logit scale frozen at ``exp(0)``, or a ``tanh``, ``hardtanh`` or
``clamp(-1, 1)`` after the last layer. A row whose logits span at most 2 gives its target a
probability of at most ``1 / (1 + (C - 1) e^-2)``: the loss cannot fall below ``log(1 + (C -
1) e^-2)`` (2.6 over 100 classes), and every example, however well placed, keeps its full
gradient (NormFace, Wang et al. 2017, on why a normalised softmax needs its scale).

On sampled steps the input of a training ``cross_entropy`` is walked back (``bound_of``)
through ops that keep a bound (views, constant and learned factors, masks, sums, selections
and elementwise functions of bounded values) to a ``tanh``, ``hardtanh``, ``clamp``, ``cos`` or a product of unit vectors
(``mm``/``bmm``, or a sum over a product: ``cosine_similarity``). Where one is reached, the
widest spread of a row's logits and the fewest logits in a row are read (one host read; values
of ``MASKED`` or below, a masked diagonal's ``-inf`` or ``-1e9``, are left out). At the run's
end a line with ``READS`` such reads or more, every spread within ``SPREAD`` (a scale that
learns past it, or a temperature below 1, is not bounded), whose floor ``log(1 + (C - 1)
e^-spread)`` is ``FLOOR`` or more, is the finding.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.loss_inputs import VIEWS, is_norm

READS = 3
"""Reads at a line before it is judged."""
SPREAD = 2.5
"""The widest a bounded row's logits may spread for the line to stay bounded: cosines and tanh
span 2, a margin taken off the target's cosine (CosFace, ArcFace's ``cos - mm``) up to 0.5
more."""
FLOOR = 0.5
"""The least floor on the loss that is named: 6 classes or more at a spread of 2 (two classes'
floor is 0.13: a binary tanh head can still be confident enough)."""
MASKED = -1e4
"""Logits at or below this are masked out of their row (a diagonal filled with -inf or -1e9)."""
HOPS = 12
"""Autograd nodes walked back from the loss's input, at most."""

BOUNDING = {
    "TanhBackward0": "a tanh",
    "HardtanhBackward0": "a hardtanh",
    "ClampBackward1": "a clamp",
    "CosBackward0": "a cosine of angles",
}
"""Ops whose outputs lie in [-1, 1] (a clamp or hardtanh of its own bounds: the read spread
tells)."""
KEEPING = re.compile(
    r"CopySlices|(MaskedFill|IndexPut|Index|IndexSelect|Gather|Neg|Sqrt|Pow|Abs|Exp|Sin|Acos"
    r"|Asin|Max|Amax|Min|Amin|Mean)Backward\d+"
)
"""Ops whose output is some of their first input's values, the rest filled in (a diagonal set
to -inf in place: ``fill_diagonal_``, ``sim[mask] = -1e9``), or a function of each that keeps
a bound (ArcFace's ``sqrt(1 - cos^2)``, ``acos``, the best of a class's sub-centres)."""
SCALING = re.compile(r"(Mul|Div)Backward\d+")
"""A bounded value times or over a factor (a constant, or a learned scale: the spread tells)."""
JOINING = re.compile(r"(Add|Sub|Cat|Stack|Where)Backward\d+")
"""Ops that join several inputs: bounded where each input with a graph is."""
PRODUCTS = ("MmBackward0", "BmmBackward0", "CdistBackward0", "EuclideanDistBackward0")
"""Products of two sets of vectors (and distances between them): bounded where both are unit
vectors."""


class BoundedLogits:
    """``note`` is given each training ``cross_entropy`` on a sampled step; ``finish`` at the
    run's end."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        # line -> (what bounds it, reads of (widest spread, fewest logits in a row));
        # None: its logits are not bounded
        self.lines: dict[str, tuple[str, list[tuple[float, int]]] | None] = {}

    def note(self, input: torch.Tensor) -> None:
        """``F.cross_entropy(input, ...)`` with gradients, on a sampled step."""
        if input.dim() < 2 or input.grad_fn is None or input.shape[1] < 2:
            return
        where = sites.user_site(2)
        if where in self.lines and self.lines[where] is None:
            return
        bound = bound_of(input.grad_fn, HOPS)
        if bound is None:
            self.lines[where] = None
            return
        rows = input.detach().movedim(1, -1).reshape(-1, input.shape[1]).float()
        kept = rows > MASKED
        with torch.no_grad():
            high = torch.where(kept, rows, -math.inf).amax(1)
            low = torch.where(kept, rows, math.inf).amin(1)
            counted = kept.sum(1)
            spread, fewest = torch.stack([(high - low).max(), counted.min().float()]).tolist()
        if not math.isfinite(spread):
            return
        line = self.lines.setdefault(where, (bound, []))
        if line is not None:
            line[1].append((spread, int(fewest)))

    def finish(self) -> None:
        """The run ended: each line whose logits stayed bounded on every read."""
        for where, line in self.lines.items():
            if line is None or len(line[1]) < READS:
                continue
            bound, reads = line
            spread = max(s for s, _ in reads)
            classes = min(n for _, n in reads)
            floor = math.log1p((classes - 1) * math.exp(-spread))
            if spread <= SPREAD and floor >= FLOOR:
                self.add(logits_bounded(where, bound, spread, classes, floor, len(reads)))


def bound_of(node: Any, hops: int) -> str | None:
    """What bounds the values ``node`` makes (``BOUNDING``'s names, "cosine similarities"),
    through ops that keep a bound; None where nothing does within ``hops`` nodes."""
    if node is None or hops < 0:
        return None
    name = type(node).__name__
    if name in BOUNDING:
        return BOUNDING[name]
    inputs = [n for n, _ in node.next_functions if n is not None]
    if name in PRODUCTS:
        return "cosine similarities" if _unit_sides(node, hops) else None
    if name == "SumBackward1" and inputs and type(inputs[0]).__name__ == "MulBackward0":
        return "cosine similarities" if _unit_sides(inputs[0], hops) else None
    if name == "DivBackward0" and len(inputs) == 2 and _by_norms(inputs[1]):
        if type(inputs[1]).__name__ == "AddBackward0":  # x / (1 + |x|)
            return "a softsign"
        if type(inputs[0]).__name__ in (*PRODUCTS, "SumBackward1"):
            return "cosine similarities"  # (a . b) / (|a| |b|), by hand
    if not inputs:
        return None
    if VIEWS.fullmatch(name) or KEEPING.fullmatch(name):
        return bound_of(inputs[0], hops - 1)
    if SCALING.fullmatch(name):  # one side bounded, the other a factor
        return next((b for b in (bound_of(i, hops - 1) for i in inputs) if b is not None), None)
    if JOINING.fullmatch(name):
        bounds = [bound_of(i, hops - 1) for i in inputs]
        return bounds[0] if all(b is not None for b in bounds) else None
    return None


def _unit_sides(product: Any, hops: int) -> bool:
    """Both factors of ``product`` (an ``mm``, ``bmm`` or elementwise ``mul``) are unit
    vectors: each divided by its norm (``F.normalize``) on the way, through views and
    factors."""
    sides = [n for n, _ in product.next_functions]
    if len(sides) != 2:
        return False
    return all(
        _unit(side, hops - 1) if side is not None else _unit_saved(product, i)
        for i, side in enumerate(sides)
    )


def _unit_saved(product: Any, i: int) -> bool:
    """Factor ``i`` of an ``mm``/``bmm`` without a graph (a momentum encoder's keys, a queue of
    them, a bank of normalised prototypes) holds unit vectors: its rows (the first) or columns
    (the second), read off the product's saved tensors (one host read); of an elementwise
    product (summed over its last dim: MoCo's positive logit), along that dim."""
    name = type(product).__name__
    try:
        if name in ("MmBackward0", "BmmBackward0"):
            side, dim = (product._saved_self, -1) if i == 0 else (product._saved_mat2, -2)
        elif name == "MulBackward0":  # (summed over the last dim after it)
            side, dim = (product._saved_self if i == 0 else product._saved_other), -1
        else:
            return False
    except (AttributeError, RuntimeError):  # freed, or another torch's names
        return False
    if not isinstance(side, torch.Tensor) or not side.is_floating_point() or side.dim() < 1:
        return False
    with torch.no_grad():
        lengths = side.float().norm(dim=dim)
        return bool(((lengths - 1).abs() <= 1e-3).all())


def _unit(node: Any, hops: int) -> bool:
    """``node`` divides by a norm, through views, selections and factors."""
    if node is None or hops < 0:
        return False
    name = type(node).__name__
    inputs = [n for n, _ in node.next_functions]
    if name == "DivBackward0" and len(inputs) > 1 and is_norm(inputs[1]):
        return True
    passing = VIEWS.fullmatch(name) or KEEPING.fullmatch(name) or SCALING.fullmatch(name)
    if passing or name == "CatBackward0":
        return any(_unit(i, hops - 1) for i in inputs if i is not None)
    return False


def _by_norms(node: Any) -> bool:
    """``node`` is a norm, a product of norms (``|a| * |b|``), or ``1 + |x|`` (a softsign's)."""
    name = type(node).__name__
    if name in ("MulBackward0", "AddBackward0"):
        inputs = [n for n, _ in node.next_functions if n is not None]
        return bool(inputs) and all(is_norm(i) or "Abs" in type(i).__name__ for i in inputs)
    return is_norm(node)


def logits_bounded(
    where: str, bound: str, spread: float, classes: int, floor: float, reads: int
) -> Finding:
    """``cross_entropy`` at ``where`` was given logits made by ``bound``, spread ``spread`` at
    most within a row of ``classes`` on each of ``reads`` sampled steps."""
    best = 1 / (1 + (classes - 1) * math.exp(-spread))
    return Finding(
        "logits-bounded",
        "warning",
        f"cross_entropy was given {bound} as its logits, unscaled: on every sampled step "
        f"({reads}) a row's {classes} logits spread over {spread:.2f} at most, so the target "
        f"gets a probability of {best:.2f} at best and the loss cannot fall below {floor:.2f} "
        f"(log {classes} = {math.log(classes):.2f}); every example keeps pushing however well "
        "it is placed",
        where=where,
        evidence={
            "bound": bound,
            "spread": round(spread, 3),
            "classes": classes,
            "floor": round(floor, 3),
            "reads": reads,
        },
    )

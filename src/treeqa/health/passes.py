"""What the DataLoaders have given: the last passes (one iterator each) drawn from, the last
batch of the newest, and how many batches were drawn with gradients on, kept by ``loaders.py`` as batches are drawn and read by the
checks that compare a model's inputs and a loss's targets with the batches
(``same-batch-every-step`` in ``repeats.py``, ``targets-shuffled-apart`` in ``pairing.py``);
and, on the draws for a sampled step, the batches themselves until its end."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from treeqa.health import checks
from treeqa.health.collapse import tensors
from treeqa.health.findings import Finding

PASSES = 16
"""Passes kept, the newest."""
HELD = 4
"""Of those, the newest whose last batch is held (until the next is drawn from them)."""
KEPT = 8
"""Batches kept for a sampled step, at most."""
TOLERANCE = 1e-6
"""Relative difference of sums within which two tensors hold the same values (a float64 batch
cast to float32 moves its sums by ~1e-8)."""


ORDERED = 65536
"""Elements of a tensor up to which its values are also summed weighted by their place."""


def readable(x: Any) -> bool:
    """A dense tensor with values to sum: not empty, complex or quantized."""
    return checks.dense(x) and x.numel() > 0 and not (x.is_complex() or x.is_quantized)


def provenance(x: torch.Tensor) -> torch.Tensor:
    """[elements, sum, sum of squares, sum weighted by place in the flattened order (NaN over
    ``ORDERED`` elements)] of ``x`` in float64 (float32 on MPS), on its device: the first
    three the same under a view, a transpose, a squeeze, a cast of exact values or a move to a
    device, so a tensor made so from a batch is told as that batch's (``same_values``); the
    fourth tells apart two batches of labels that hold as many of each class."""
    wide = checks.wide(x.device)
    values = x.detach()
    n = values.numel()
    if n <= ORDERED:
        places = torch.arange(1, n + 1, device=x.device, dtype=wide)
        ordered = (values.reshape(-1).to(wide) * places).sum()
    else:
        ordered = torch.tensor(float("nan"), dtype=wide, device=x.device)
    return torch.stack(
        [
            torch.tensor(float(n), dtype=wide, device=x.device),
            values.sum(dtype=wide),
            values.to(wide).square().sum(),
            ordered,
        ]
    )


def same_values(a: list[float], b: list[float], ordered: bool = False) -> bool:
    """Whether two ``provenance`` read back hold the same values (``ordered``: in the same
    order too, where both were summed so: a target, which is not transposed)."""
    if a[0] != b[0]:
        return False
    compared = 4 if ordered and math.isfinite(a[3]) and math.isfinite(b[3]) else 3
    return all(
        abs(u - v) <= TOLERANCE * max(abs(u), abs(v), 1e-30)
        for u, v in zip(a[1:compared], b[1:compared], strict=True)
    )


def constant(values: list[float]) -> bool:
    """Whether a ``provenance`` read back is of one value repeated (n * sum(x^2) = sum(x)^2):
    a mask of ones, a domain label, which tell nothing of where they came from."""
    n, total, squares, _ = values
    return abs(n * squares - total * total) <= 1e-9 * max(n * squares, 1e-30)


@dataclass(slots=True)
class Pass:
    """A pass over a DataLoader (one iterator): the loader's ``id``, what it draws from
    (``dataset``: its dataset's id, or a ``SubsetRandomSampler``'s indices of it) and the
    dataset itself (``data``, weakly; None where it takes no weak reference; the ``loader``
    weakly too),
    its ``batch_size`` (None: a batch sampler without one), its ``batches`` (None: no
    length), its dataset's ``examples`` (None: no length), the loader ``described`` in words,
    whether its batches' dataset indices are followed (``indexed``: not where worker processes
    fetch them), whether it shuffles by a ``RandomSampler`` seeded anew from torch's generator
    (``at_random``), whether it draws each of its examples once (``whole``); the batches ``taken`` from it, the ``last`` batch taken (held by the
    newest ``HELD``: ``held``), the count of all draws when it was (``at``), and the dataset
    indices of the batch being drawn for a sampled step (``indices``)."""

    id: int
    dataset: int
    batch_size: int | None
    batches: int | None
    examples: int | None
    described: str
    indexed: bool
    at_random: bool
    whole: bool = False
    data: Any = None
    loader: Any = None  # the loader, weakly (its dataset where that takes no weak reference)
    taken: int = 0
    last: Any = None
    at: int = 0
    held: bool = True
    indices: Any = None
    shuffled: bool = False  # its sampler draws at random (``loaders._shuffles``)


@dataclass(slots=True)
class Kept:
    """A batch drawn for a sampled step: its pass, the ``provenance`` of each of its tensors
    when drawn (read back: before the script edits it in place), its dataset ``indices``
    (None: not followed)."""

    drawn_from: Pass
    values: list[list[float]]
    indices: Any


@dataclass
class Drawn:
    """``draws`` from any loader; ``batches`` drawn with gradients on; the last ``PASSES``
    passes drawn from (with gradients or not: a batch drawn once inside a ``no_grad`` helper
    and trained on), by their id, the newest last; and the batches drawn for the sampled step
    to come, with their passes (``kept``)."""

    draws: int = 0
    batches: int = 0
    passes: dict[int, Pass] = field(default_factory=dict)
    kept: list[Kept] = field(default_factory=list)

    def note(self, drawn_from: Pass, trained: bool) -> None:
        """A batch was drawn (with gradients on: ``trained``) from the pass ``drawn_from``."""
        self.draws += 1
        self.batches += trained
        drawn_from.taken += 1
        drawn_from.at = self.draws
        if id(drawn_from) not in self.passes:  # the newest last
            self.passes[id(drawn_from)] = drawn_from
            if len(self.passes) > PASSES:
                del self.passes[next(iter(self.passes))]
            for older in list(self.passes.values())[:-HELD]:
                older.held, older.last = False, None  # its batch let go

    def keep(self, drawn_from: Pass, batch: Any, indices: Any) -> None:
        """``batch`` was drawn from ``drawn_from`` for a sampled step, of these dataset
        ``indices`` (None: not known): its tensors read now (one host read)."""
        if len(self.kept) >= KEPT:
            return
        read = [x for x in tensors(batch) if readable(x)]
        if read:
            device = read[0].device
            values = torch.stack([provenance(x).to(device) for x in read]).tolist()
            self.kept.append(Kept(drawn_from, values, indices))


class BatchCheck:
    """A check of a trained model's forwards against the batches drawn: ``add``: where its
    finding goes (one a run: ``said``); ``models``: the trained models now; ``drawn``: what
    the DataLoaders have given (``Loaders.drawn_batches``)."""

    def __init__(
        self,
        add: Callable[[Finding], None],
        models: Callable[[], list[nn.Module]],
        drawn: Callable[[], Drawn],
    ):
        self.add, self.models, self.drawn = add, models, drawn
        self.said = False
        self.start()

    def start(self) -> None:
        """Set the check's own state."""

    def trained(self, module: nn.Module) -> bool:
        """Whether a forward of ``module`` is a trained model's, in training, with gradients,
        and the finding is still to be made."""
        if self.said or not module.training or not torch.is_grad_enabled():
            return False
        return any(module is m for m in self.models())

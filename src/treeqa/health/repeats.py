"""A model trained on the same batch at every step (``same-batch-every-step``).

``x, y = next(iter(loader))`` above the loop (left from a shape check, or from overfitting one
batch on purpose and never put back), or a loop over the loader whose body gives the model a
tensor from outside it (``for xb, yb in loader: out = model(x)``): the model fits one batch
and sees none of the rest, and its training loss falls as it would for real training, to
near zero. Nothing fails; the held-out score is what a model of one batch scores.

On sampled steps, every forward of a trained model in training (with gradients on; the first
``FORWARDS``) has its inputs read as fingerprints (``fingerprint``: sums weighted by row and
by column, so one-hot rows, which all sum alike, are told apart), with their shapes: the
positional tensors, then those given by keyword. ``STEPS`` sampled steps in a row with the
same readings, over ``SPAN`` steps or more, make the finding where a first input has as many
rows (or, time first, columns) as the batches of a DataLoader drawn from, of 2 examples or
more, that has 2 batches or more (full-batch training on a tensor, by design, has the set's
rows; a batch of one is what a model fitted to one example, on purpose, is given), and either
no batch was drawn with gradients on over those steps while that loader's last pass was left
before its end (the batch drawn once before them: a pass read to its end was read for
something else, statistics, a mean), or one or more was drawn at every step (the loop's
batches do not reach the model). Validation batches, drawn without gradients, count for
neither. A forward that differs from the last sampled step's (the batch, after a fixed one:
boundary points, a start token, a replayed memory) makes the step differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from treeqa.health import checks, sites
from treeqa.health.collapse import tensors
from treeqa.health.findings import Finding

STEPS = 3
"""Sampled steps in a row given the same inputs."""
SPAN = 50
"""Steps from the first such sampled step to the last, at least: an inner loop on one batch by
design (a meta-learner's 30 steps on a task's support set, test-time adaptation on one
example, 30 steps overfitting one batch as a check before training) is shorter."""
FORWARDS = 16
"""Forwards of the trained models read a sampled step, at most."""
LOADERS = 16
"""Loaders whose last pass is kept, the newest."""


@dataclass
class Drawn:
    """What the DataLoaders have given so far: ``batches`` drawn with gradients on, and the
    last pass drawn from each of the last ``LOADERS`` loaders (with gradients or not: a batch
    drawn once inside a ``no_grad`` helper and trained on), by the loader's id, as [its batch
    size, its batches (None: no length), the batches drawn from it, the loader in words,
    whether one was drawn with gradients on]."""

    batches: int = 0
    passes: dict[int, list[Any]] = field(default_factory=dict)

    def note(self, loader: int, drawn_from: list[Any], trained: bool) -> None:
        """A batch was drawn (with gradients on: ``trained``) from the pass ``drawn_from`` of
        the loader whose id is ``loader``."""
        drawn_from[2] += 1
        drawn_from[4] = drawn_from[4] or trained
        if self.passes.get(loader) is not drawn_from:
            self.passes.pop(loader, None)  # the newest last
            self.passes[loader] = drawn_from
            if len(self.passes) > LOADERS:
                del self.passes[next(iter(self.passes))]


def fingerprint(x: torch.Tensor) -> torch.Tensor:
    """[sum, sum of the rows' sums weighted by row, sum of the columns' sums weighted by
    column] of ``x`` (rows: dim 0) in float64 (float32 on MPS), on its device: the same
    tensor gives the same three, another batch almost never does, one-hot rows included."""
    wide = checks.wide(x.device)
    rows = x.detach().reshape(x.shape[0], -1) if x.dim() >= 1 else x.detach().reshape(1, 1)
    by_row = rows.sum(1, dtype=wide)  # [R]
    by_column = rows.sum(0, dtype=wide)  # [C]
    r = torch.arange(1, by_row.numel() + 1, device=x.device, dtype=wide)
    c = torch.arange(1, by_column.numel() + 1, device=x.device, dtype=wide)
    return torch.stack([by_row.sum(), (by_row * r).sum(), (by_column * c).sum()])


class SameInputs:
    """``add``: where the finding goes; ``models``: the trained models now; ``drawn``: what
    the DataLoaders have given so far (``Loaders.trained``)."""

    def __init__(
        self,
        add: Callable[[Finding], None],
        models: Callable[[], list[nn.Module]],
        drawn: Callable[[], Drawn],
    ):
        self.add, self.models, self.drawn = add, models, drawn
        self.said = False
        # This sampled step's forwards: (model, the batch sizes a first input may hold,
        # shapes, fingerprints, where it was called) of each.
        self.reading: list[tuple[str, list[int], list[list[int]], torch.Tensor, str]] = []
        self.last: list[Any] | None = None  # the last sampled step's, read back
        self.steps: list[tuple[int, int]] = []  # (step, batches drawn) of those in a row

    def begin_step(self) -> None:
        """A sampled step starts."""
        self.reading = []

    def note(self, name: str, module: nn.Module, inputs: Any, keywords: Any) -> None:
        """``module`` (named ``name``) finished a forward on ``inputs`` and ``keywords`` (a
        dict) in a sampled step."""
        if self.said or len(self.reading) >= FORWARDS or not module.training:
            return
        if not torch.is_grad_enabled() or not any(module is m for m in self.models()):
            return
        given = [*tensors(inputs), *tensors(keywords)]  # model(input_ids=..., mask=...)
        given = [x for x in given if not x.is_complex() and x.numel() > 0]
        if not given:
            return
        prints = torch.stack([fingerprint(x).to(given[0].device) for x in given])
        first = given[0]
        sizes = [int(first.shape[0])] if first.dim() >= 1 else []
        if first.dim() >= 3 or (first.dim() == 2 and not first.is_floating_point()):
            sizes.append(int(first.shape[1]))  # time first: [T, B, F] features, [T, B] ids
        # Where the model is called, once the last two sampled steps' were the same.
        where = sites.user_site() if len(self.steps) >= STEPS - 1 else ""
        self.reading.append((name, sizes, [list(x.shape) for x in given], prints, where))

    def judge(self, step: int) -> None:
        """The sampled step ``step`` ended: read its fingerprints back (one host read)."""
        if self.said or not self.reading:
            self.steps, self.last = [], None
            return
        forwards, self.reading = self.reading, []
        device = forwards[0][3].device
        values = torch.cat([f[3].flatten().to(device) for f in forwards]).tolist()
        now = [[(f[0], f[2]) for f in forwards], values]
        drawn = self.drawn()
        if now != self.last:
            self.steps = []
        self.last = now
        self.steps.append((step, drawn.batches))
        if len(self.steps) < STEPS or step - self.steps[0][0] < SPAN:
            return
        first, batches = self.steps[0][0], drawn.batches - self.steps[0][1]
        if batches != 0 and batches < step - first:  # some steps drew a batch, some did not
            return
        for name, sizes, shapes, _, where in forwards:
            for size in sizes:
                drawn_from = _loader_of(drawn, size, batches)
                if drawn_from is not None:
                    self.said = True
                    found = same_batch_every_step(
                        name, shapes[0], (first, step), len(self.steps), drawn_from, batches
                    )
                    found.where = where
                    self.add(found)
                    return


def _loader_of(drawn: Drawn, size: int, batches: int) -> tuple[str, int, int] | None:
    """(in words, its batches, ``size``) of the loader whose batches of ``size`` (2 or more)
    the model was given, else None: of the passes that drew such batches, the newest drawn
    with gradients on, or where none was, any drawn without (a batch drawn once in a
    ``no_grad`` helper, and validation passes after it); one of a loader of 2 batches or more
    that, where no batch was drawn over the steps judged (``batches``), was left before its
    end."""
    of_size = [p for p in drawn.passes.values() if p[0] == size and size >= 2]
    trained = [p for p in of_size if p[4]]
    for _, length, taken, described, _ in trained[-1:] or of_size:
        if length is not None and length >= 2 and (batches or taken < length):
            return described, length, size
    return None


def same_batch_every_step(
    model: str,
    shape: list[int],
    span: tuple[int, int],
    steps: int,
    loader: tuple[str, int, int],
    batches: int,
) -> Finding:
    """``model`` was given the same inputs (the first of ``shape``) on ``steps`` sampled steps
    over ``span`` (first, last), over which ``batches`` were drawn with gradients on; its
    batch is one of ``loader``'s (in words, its batches, their size)."""
    (first, last), (described, length, size) = span, loader
    if batches:
        how = (
            f"while DataLoaders gave a new batch at every step ({batches} over them): the "
            "loop's batches do not reach the model, which is given a tensor from outside the "
            "loop"
        )
    else:
        how = (
            f"and no batch was drawn over them: one batch of {size} examples drawn from "
            f"{described} ({length} batches) before them is trained on over and over "
            "(next(iter(loader)) above the loop)"
        )
    return Finding(
        "same-batch-every-step",
        "warning",
        f"{model} was given the same batch {shape} on {steps} sampled steps in a row (steps "
        f"{first}-{last}) {how}, so it fits those examples and sees none of the rest (where "
        "overfitting one batch is the point, as a check that the model can, ignore this)",
        evidence={
            "steps": [first, last],
            "sampled_steps": steps,
            "shape": shape,
            "loader_batches": length,
            "batch_size": size,
            "batches_drawn_over_them": batches,
        },
    )

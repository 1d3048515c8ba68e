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
same readings, over ``SPAN`` steps or more, make the finding where an input, or a target of
the step's training losses (the batch normalised for the model, its labels as drawn), holds
the values of a tensor of a batch the DataLoaders drew before the first of them
(``passes.provenance``: the same under a cast, a view, a transpose or a move to a device), the
last of a pass not drawn from since, over a loader of 2 batches or more of 2 examples or more
(a batch of one is what a model fitted to one example on purpose is given);
and either no batch was drawn with gradients on over those steps (the batch drawn once above
the loop), or one was drawn for each of them (the loop's batches do not reach the model). A
fixed input that is no batch of a loader (boundary points, a prompt, a mask, a latent grid,
the whole set as one tensor) is not named, nor is a step with any forward that differs from
the last sampled step's (the batch, after a fixed one), nor steps of a replayed memory drawn
once that alternate with steps that draw (no batch drawn for the sampled ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from treeqa.health import checks, sites
from treeqa.health.collapse import tensors
from treeqa.health.findings import Finding
from treeqa.health.passes import BatchCheck, constant, provenance, readable, same_values

STEPS = 3
"""Sampled steps in a row given the same inputs."""
SPAN = 50
"""Steps from the first such sampled step to the last, at least: an inner loop on one batch by
design (a meta-learner's 30 steps on a task's support set, test-time adaptation on one
example, 30 steps overfitting one batch as a check before training) is shorter."""
FORWARDS = 16
"""Forwards of the trained models read a sampled step, at most."""
TARGETS = 4
"""Training losses' targets read a sampled step, at most."""


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


def data(inputs: tuple[Any, ...], keywords: dict[str, Any]) -> list[torch.Tensor]:
    """The dense tensors a forward was given that no layer made (leaves of the graph: a
    batch's, one made to require gradients for an input-gradient penalty; not a backbone's
    features), positional then by keyword, one level further into tuples, lists and dicts
    (``model((ids, lengths))``, a ``PackedSequence``)."""
    given = (*inputs, *keywords.values())
    return [x for value in given for x in tensors(value) if x.grad_fn is None]


@dataclass
class Forward:
    """A trained model's forward on a sampled step: the ``model``'s name, its inputs'
    ``shapes`` and ``prints`` ([inputs, 3] fingerprints), ``where`` it was called and its
    inputs' provenance ``values`` ([inputs, 3]; None: not read)."""

    model: str
    shapes: list[list[int]]
    prints: torch.Tensor
    where: str
    values: torch.Tensor | None


class SameInputs(BatchCheck):
    """The check, over the forwards of the trained models (``BatchCheck``)."""

    def start(self) -> None:
        # This sampled step's forwards: (model, shapes, fingerprints, where it was called,
        # the inputs' provenance once the steps before were the same) of each.
        self.reading: list[Forward] = []
        self.last: list[Any] | None = None  # the last sampled step's, read back
        # (step, batches drawn with gradients on, whether batches were drawn for it) of the
        # sampled steps in a row with the same readings, and the draws before the first
        self.steps: list[tuple[int, int, bool]] = []
        self.draws = 0
        self.targets: list[tuple[torch.Tensor, str]] = []  # the step's losses', once read

    def begin_step(self) -> None:
        """A sampled step starts."""
        self.reading, self.targets = [], []

    def note(self, name: str, module: nn.Module, inputs: Any, keywords: Any) -> None:
        """``module`` (named ``name``) finished a forward on ``inputs`` and ``keywords`` (a
        dict) in a sampled step."""
        if len(self.reading) >= FORWARDS or not self.trained(module):
            return
        given = [x for x in data(inputs, keywords) if readable(x)]
        if not given:  # (a head given features that train: not a batch)
            return
        device = given[0].device
        prints = torch.stack([fingerprint(x).to(device) for x in given])
        where, values = "", None
        if len(self.steps) >= STEPS - 1:  # the last sampled steps' were the same
            where = sites.user_site()  # where the model is called
            values = torch.stack([provenance(x).to(device) for x in given])
        self.reading.append(Forward(name, [list(x.shape) for x in given], prints, where, values))

    def judge(self, step: int) -> None:
        """The sampled step ``step`` ended: read its fingerprints back (one host read)."""
        if self.said or not self.reading:
            self.steps, self.last = [], None
            return
        forwards, self.reading = self.reading, []
        device = forwards[0].prints.device
        values = torch.cat([f.prints.flatten().to(device) for f in forwards]).tolist()
        now = [[(f.model, f.shapes) for f in forwards], values]
        drawn = self.drawn()
        if now != self.last:
            self.steps, self.draws = [], drawn.draws - len(drawn.kept)
        self.last = now
        self.steps.append((step, drawn.batches, bool(drawn.kept)))
        if len(self.steps) < STEPS or step - self.steps[0][0] < SPAN:
            return
        # Nothing drawn with gradients on over them, or a batch drawn for each of them.
        first, batches = self.steps[0][0], drawn.batches - self.steps[0][1]
        if batches and not all(kept for _, _, kept in self.steps):
            return
        found = self._stale(forwards, (first, step), batches)
        if found is not None:
            self.said = True
            self.add(found)

    def target(self, target: Any, input: Any = None) -> None:
        """A training loss scored ``input`` against ``target`` on a sampled step: the target
        read where the steps before were the same (a batch normalised for the model, its
        labels as drawn)."""
        if self.said or not self.reading or len(self.targets) >= TARGETS:
            return
        if len(self.steps) >= STEPS - 1 and readable(target):
            self.targets.append((provenance(target), sites.user_site(3)))

    def _stale(
        self, forwards: list[Forward], span: tuple[int, int], batches: int
    ) -> Finding | None:
        """The finding, where an input of these forwards or a target of their losses holds the
        values of a tensor of the last batch of a pass not drawn from since before the first
        of the steps, over a loader of 2 batches or more of 2 examples or more (a batch of one
        is what a model fitted to one example on purpose is given); else None."""
        stale = [
            p
            for p in self.drawn().passes.values()
            if p.last is not None
            and p.at <= self.draws
            and (p.batches is None or p.batches >= 2)
            and (p.batch_size is None or p.batch_size >= 2)
        ]
        held = [(p, x) for p in stale for x in tensors(p.last) if readable(x)]
        # (forward, its input's shape, the value, where; None: a target, its order kept)
        read: list[tuple[Forward, list[int] | None, torch.Tensor, str]] = [
            (f, shape, v, f.where)
            for f in forwards
            if f.values is not None
            for shape, v in zip(f.shapes, f.values, strict=True)
        ]
        read += [(forwards[0], None, v, where) for v, where in self.targets]
        if not held or not read:
            return None
        device = read[0][2].device
        given = torch.stack([v.to(device) for _, _, v, _ in read])
        batch = torch.stack([provenance(x).to(device) for _, x in held])
        values = torch.cat([given, batch]).tolist()
        for (f, shape, _, where), v in zip(read, values, strict=False):
            for (p, x), b in zip(held, values[len(read) :], strict=True):
                # in its order, unless a transpose of it (the time-first input of a batch)
                moved = shape is not None and shape != list(x.shape)
                if not constant(v) and same_values(v, b, ordered=not moved):
                    loader = (p.described, p.batches, p.batch_size)
                    found = same_batch_every_step(
                        f.model, f.shapes[0], span, len(self.steps), loader, batches
                    )
                    found.where = where
                    return found
        return None


def same_batch_every_step(
    model: str,
    shape: list[int],
    span: tuple[int, int],
    steps: int,
    loader: tuple[str, int | None, int | None],
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
            f"and no batch was drawn over them: one batch{f' of {size} examples' if size else ''} drawn from "
            f"{described}{f' ({length} batches)' if length else ''} before them is trained on over and over "
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

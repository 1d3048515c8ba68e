"""Inputs and targets from two DataLoaders drawn apart (``targets-shuffled-apart``).

Images in one dataset and their masks (or labels) in another, each given its own DataLoader
with ``shuffle=True``, the two zipped: each loader draws its own order, so the i-th target of
a batch is not the i-th input's. Nothing fails: the model is trained on targets that are noise
for it, its loss stays near the best constant's, and the task looks hard.

The batches drawn with gradients on for a sampled step are kept with their tensors' values
(``passes.provenance``: elements, sum and sum of squares, the same under a view, a squeeze,
a cast of exact values or a move to a device) and the dataset indices they were drawn at
(``passes.Kept``). On the step, every forward of a trained model in training has its data
inputs read so (those no gradient flows into), and the training losses their targets (not
one value repeated: a domain label). A target that is a tensor of one loader's batch, of a
loader none of whose batch went into a forward, while another loader's batch did, the two
over datasets of as many examples (paired sets) drawn at different indices, is apart; where
the indices are not followed (worker processes fetch them ahead), two loaders each shuffled by
a ``RandomSampler`` seeded anew from torch's generator are. ``STEPS`` sampled steps in a row
so make the finding. Not apart: each loader's batch going into a forward of its own with its
own targets (domain adaptation, multi-task, a CycleGAN's cycle losses, semi-supervised
learning), paired loaders in one order (not shuffled, or by one permutation), a batch mixed
into another in place (read as drawn), and a constant target.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from treeqa.health import checks, sites
from treeqa.health.findings import Finding
from treeqa.health.passes import BatchCheck, Kept, Pass, constant, provenance, same_values
from treeqa.health.repeats import FORWARDS, data

STEPS = 3
"""Sampled steps in a row apart."""
TARGETS = 4
"""Training losses' targets read a sampled step, at most."""


class Pairing(BatchCheck):
    """The check, over the forwards of the trained models (``BatchCheck``)."""

    def start(self) -> None:
        self.forwards = 0  # this sampled step's forwards read
        self.inputs: list[tuple[str, torch.Tensor]] = []  # (model, an input's provenance)
        self.targets: list[tuple[torch.Tensor, str]] = []  # (a target's provenance, where)
        self.others: list[torch.Tensor] = []  # what modules not watched were given
        self.steps: list[int] = []  # the sampled steps in a row apart

    def begin_step(self) -> None:
        """A sampled step starts."""
        self.forwards, self.inputs, self.targets, self.others = 0, [], [], []

    def elsewhere(self, module: nn.Module, inputs: Any, keywords: Any) -> None:
        """A module the monitor does not watch (``module``) ran a forward in a sampled step:
        its data inputs went into a model too (an AC-GAN's generator given the labels it is to
        draw, whose critic's loss then takes them as targets), not apart from its inputs. A
        loss module's targets are not."""
        if self.said or len(self.others) >= FORWARDS or not torch.is_grad_enabled():
            return
        if isinstance(module, nn.modules.loss._Loss):
            return
        for x in data(inputs, keywords):
            if x.numel() and not x.is_complex() and len(self.others) < FORWARDS:
                self.others.append(provenance(x))

    def forward(self, name: str, module: nn.Module, inputs: Any, keywords: Any) -> None:
        """``module`` (named ``name``) finished a forward in a sampled step."""
        if self.forwards >= FORWARDS or not self.trained(module):
            return
        self.forwards += 1
        for x in data(inputs, keywords):
            if x.numel() and not x.is_complex():
                self.inputs.append((name, provenance(x)))

    def target(self, target: Any) -> None:
        """A training loss (with gradients) was taken against ``target`` on a sampled step."""
        if self.said or not self.inputs or len(self.targets) >= TARGETS:
            return
        if checks.dense(target) and target.numel() and not target.is_complex():
            self.targets.append((provenance(target), sites.user_site(3)))

    def judge(self, step: int) -> None:
        """The sampled step ``step`` ended: its inputs and targets against the batches drawn
        for it (one host read)."""
        kept = self.drawn().kept
        if self.said or not self.inputs or not self.targets or len(kept) < 2:
            self.steps = []
            return
        device = self.inputs[0][1].device
        read = [v for _, v in self.inputs] + [v for v, _ in self.targets] + self.others
        values = torch.stack([v.to(device) for v in read]).tolist()
        given = values[: len(self.inputs)]
        targets = values[len(self.inputs) : len(self.inputs) + len(self.targets)]
        others = values[len(self.inputs) + len(self.targets) :]
        fed = {  # the batches that went into a trained model's forward, with the model
            id(k): (k, name)
            for (name, _), v in zip(self.inputs, given, strict=True)
            for k in kept
            if any(same_values(v, b) for b in k.values)
        }
        elsewhere = {
            id(k) for v in others for k in kept if any(same_values(v, b) for b in k.values)
        }
        apart = None
        for t, (_, where) in zip(targets, self.targets, strict=True):
            if constant(t):
                continue
            of = [k for k in kept if any(same_values(t, b, ordered=True) for b in k.values)]
            if not of or any(id(k) in fed or id(k) in elsewhere for k in of):
                continue
            apart = next(
                (
                    (name, a.drawn_from, b.drawn_from, where)
                    for a, name in fed.values()
                    for b in of
                    if _drawn_apart(a, b)
                ),
                None,
            )
            if apart is not None:
                break
        if apart is None:
            self.steps = []
            return
        self.steps.append(step)
        if len(self.steps) >= STEPS:
            self.said = True
            name, inputs, targets_from, where = apart
            found = targets_shuffled_apart(name, inputs, targets_from, self.steps)
            found.where = where
            self.add(found)


def _drawn_apart(a: Kept, b: Kept) -> bool:
    """Two batches of loaders over as many examples, drawn at different dataset indices (where
    both are followed), or each shuffled by its own random order."""
    p, q = a.drawn_from, b.drawn_from
    if p.id == q.id or p.examples is None or p.examples != q.examples:
        return False
    if a.indices is not None and b.indices is not None:
        return bool(list(a.indices) != list(b.indices))
    return p.at_random and q.at_random


def targets_shuffled_apart(model: str, inputs: Pass, targets: Pass, steps: list[int]) -> Finding:
    given, taken = inputs.described, targets.described
    return Finding(
        "targets-shuffled-apart",
        "error",
        f"{model} is given batches of one DataLoader ({given.removeprefix('a DataLoader ')}) "
        f"and its loss's targets come from another ({taken.removeprefix('a DataLoader ')}), "
        f"on {len(steps)} sampled steps in a row (steps {steps[0]}-{steps[-1]}): the two draw "
        f"their {inputs.examples} examples in different orders, so the i-th target of a batch "
        "is not the i-th input's, and the model is trained on targets that are noise for it",
        evidence={
            "steps": [steps[0], steps[-1]],
            "sampled_steps": len(steps),
            "examples": inputs.examples,
            "inputs_from": given,
            "targets_from": taken,
        },
    )

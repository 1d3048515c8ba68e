"""Inputs and targets from two DataLoaders drawn apart (``targets-shuffled-apart``).

Images in one dataset and their masks (or labels) in another, each given its own DataLoader
with ``shuffle=True``, the two zipped: each loader draws its own order, so the i-th target of
a batch is not the i-th input's. Nothing fails: the model is trained on targets that are noise
for it, its loss stays near the best constant's, and the task looks hard.

The batches drawn with gradients on for a sampled step are kept with their tensors' values
(``passes.provenance``: elements, sum, sum of squares and a sum weighted by place, the first
three the same under a view, a transpose, a squeeze, a cast of exact values or a move to a
device) read as drawn, and the dataset indices they were drawn at (``passes.Kept``). On the
step, every forward of a trained model in training has its data inputs read so (those no
gradient flows into) and its outputs' autograd nodes kept; each training loss its target (not
one value repeated: a domain label) and the forwards its prediction was made from (its graph
walked back ``DEPTH`` nodes). A target that is, in its order, a tensor of one loader's batch
none of whose tensors went into a forward (of a trained model or of another, a generator
given the classes it is to draw; a loss module's are no forward), scored against a forward
given another loader's batch, the two drawn at different dataset indices, is apart; where the
indices are not followed (worker processes fetch them ahead), two loaders over as many
examples each shuffled by a ``RandomSampler`` seeded anew from torch's generator are.
``STEPS`` sampled steps in a row so make the finding. Not apart: each loader's batch going
into a forward of its own with its own targets (domain adaptation, multi-task, a CycleGAN's
cycle losses, semi-supervised learning), a loss that scores something no forward given a
batch made (a class prior, a second task's forward on a batch normalised in the loop), paired
loaders in one order (not shuffled, or by one permutation), a batch mixed into another in
place (read as drawn), and a constant target.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from treeqa.health import graphs, sites
from treeqa.health.collapse import tensors
from treeqa.health.findings import Finding
from treeqa.health.passes import BatchCheck, Kept, Pass, constant, provenance, readable, same_values
from treeqa.health.repeats import FORWARDS, data

STEPS = 3
"""Sampled steps in a row apart."""
DEPTH = 16
"""Autograd nodes walked back from a loss's input to the forwards it was made from."""
TARGETS = 4
"""Training losses' targets read a sampled step, at most."""


class Pairing(BatchCheck):
    """The check, over the forwards of the trained models (``BatchCheck``)."""

    def start(self) -> None:
        self.forwards = 0  # this sampled step's forwards read
        # (forward, model, an input's provenance); each forward's outputs' autograd nodes
        self.inputs: list[tuple[int, str, torch.Tensor]] = []
        self.outputs: dict[Any, int] = {}
        # (a target's provenance, the forwards its loss scored, where)
        self.targets: list[tuple[torch.Tensor, set[int], str]] = []
        self.others: list[torch.Tensor] = []  # what modules not watched were given
        self.steps: list[int] = []  # the sampled steps in a row apart

    def begin_step(self) -> None:
        """A sampled step starts."""
        self.forwards, self.inputs, self.targets, self.others = 0, [], [], []
        self.outputs = {}

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
            if readable(x) and len(self.others) < FORWARDS:
                self.others.append(provenance(x))

    def forward(
        self, name: str, module: nn.Module, inputs: Any, keywords: Any, output: Any
    ) -> None:
        """``module`` (named ``name``) finished a forward in a sampled step, giving ``output``."""
        if self.forwards >= FORWARDS or not self.trained(module):
            return
        self.forwards += 1
        for x in data(inputs, keywords):
            if readable(x):
                self.inputs.append((self.forwards, name, provenance(x)))
        for y in tensors(output):
            if y.grad_fn is not None:
                self.outputs[y.grad_fn] = self.forwards

    def target(self, target: Any, input: Any) -> None:
        """A training loss (with gradients) scored ``input`` against ``target`` on a sampled
        step: read with the forwards whose outputs ``input`` was made from (``DEPTH`` nodes
        of its graph back at most)."""
        if self.said or not self.outputs or len(self.targets) >= TARGETS:
            return
        if not readable(target):
            return
        scored = _reached(input, self.outputs)
        if scored:
            self.targets.append((provenance(target), scored, sites.user_site(3)))

    def judge(self, step: int) -> None:
        """The sampled step ``step`` ended: its inputs and targets against the batches drawn
        for it (one host read)."""
        self.outputs = {}  # (their nodes hold their graphs: a forward no backward took too)
        kept = self.drawn().kept
        if self.said or not self.inputs or not self.targets or len(kept) < 2:
            self.steps = []
            return
        device = self.inputs[0][2].device
        read = [v for *_, v in self.inputs] + [v for v, *_ in self.targets] + self.others
        values = torch.stack([v.to(device) for v in read]).tolist()
        given = values[: len(self.inputs)]
        targets = values[len(self.inputs) : len(self.inputs) + len(self.targets)]
        others = values[len(self.inputs) + len(self.targets) :]
        # the batches that went into each forward of a trained model, with the model
        fed = [
            (forward, name, k)
            for (forward, name, _), v in zip(self.inputs, given, strict=True)
            for k in kept
            if any(same_values(v, b) for b in k.values)
        ]
        used = {id(k) for _, _, k in fed}
        used |= {id(k) for v in others for k in kept if any(same_values(v, b) for b in k.values)}
        apart = None
        for t, (_, scored, where) in zip(targets, self.targets, strict=True):
            if constant(t):
                continue
            of = [k for k in kept if any(same_values(t, b, ordered=True) for b in k.values)]
            if not of or any(id(k) in used for k in of):
                continue
            apart = next(
                (
                    (name, a.drawn_from, b.drawn_from, where)
                    for forward, name, a in fed
                    if forward in scored
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


def _reached(input: Any, outputs: dict[Any, int]) -> set[int]:
    """The forwards (their numbers in ``outputs``, by their outputs' autograd nodes) whose
    outputs ``input`` was made from, its graph walked ``DEPTH`` nodes back at most (and on
    past them: a probe's forward, then its encoder's)."""
    node = input.grad_fn if isinstance(input, torch.Tensor) else None
    return {outputs[n] for n in graphs.walk(node, DEPTH) if n in outputs}


def _drawn_apart(a: Kept, b: Kept) -> bool:
    """Two batches of two loaders drawn at different dataset indices, where both are followed
    (over sets of any lengths: 2,001 inputs beside 2,000 labels are apart too); where they are
    not, two loaders over as many examples each shuffled by its own random order."""
    p, q = a.drawn_from, b.drawn_from
    if p.id == q.id:
        return False
    if a.indices is not None and b.indices is not None:
        return bool(list(a.indices) != list(b.indices))
    return p.examples is not None and p.examples == q.examples and p.at_random and q.at_random


def targets_shuffled_apart(model: str, inputs: Pass, targets: Pass, steps: list[int]) -> Finding:
    given, taken = inputs.described, targets.described
    return Finding(
        "targets-shuffled-apart",
        "error",
        f"{model} is given batches of one DataLoader ({given.removeprefix('a DataLoader ')}) "
        f"and its loss's targets come from another ({taken.removeprefix('a DataLoader ')}), "
        f"on {len(steps)} sampled steps in a row (steps {steps[0]}-{steps[-1]}): the two draw "
        f"their examples ({inputs.examples} and {targets.examples}) in different orders, so "
        "the i-th target of a batch is not the i-th input's, and the model is trained on "
        "targets that are noise for it",
        evidence={
            "steps": [steps[0], steps[-1]],
            "sampled_steps": len(steps),
            "examples": [inputs.examples, targets.examples],
            "inputs_from": given,
            "targets_from": taken,
        },
    )

"""Evaluation data put through random transforms (``evaluation-inputs-random``): the
validation set made by ``random_split`` of a dataset built with the training transform (the
two Subsets share it), a validation dataset given ``transform=train_tf``, a ``__getitem__``
that crops, flips or adds noise whatever the split. Every evaluation then scores inputs drawn
at random: the score is lower than the model's on the data as they are, and it moves from one
evaluation to the next by chance, which early stopping and model selection then follow.

Batches drawn over a dataset no step of the clock has trained on (an evaluation's, whether
under ``no_grad`` or not; a training loader's first batch, before its first step) from a loader
that draws each of its examples once a pass (a ``SequentialSampler``, a ``RandomSampler`` without
replacement over all of them, a ``SubsetRandomSampler``; batched by torch's ``BatchSampler``)
have each of their tensors' rows hashed on the device (``heldout.row_hashes``: exact, up to
4,096 values a row). At the end of a whole pass its hashes are compared with those of the last
whole pass over the same data (the same dataset, alive, and the same indices of it), one host
read: the same examples came again where a short tensor's rows (``TARGET``: the labels) are the
same multiset as before (a pass in another order is the same multiset), and their inputs were
drawn at random where, of a tensor of two values a row or more, of one width throughout both
passes (rows padded to each batch's longest, shuffled, change width), fewer than ``REPEATED``
of the rows are found in the last pass, and fewer than ``DRAWN`` are rows of the same pass
again (pairs a dataset draws at random from its pool repeat). A pass over a dataset the clock's
steps trained on (a training accuracy under ``no_grad``) is no evaluation, and is not hashed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.heldout import given, row_hashes
from treeqa.health.passes import Pass

REPEATED = 0.95
"""Share of a pass's rows found in the pass before, under which its inputs were drawn at
random (a flip half the time leaves about half alike, an erasing one time in ten about 81%; a
fixed transform, all)."""
DRAWN = 0.1
"""Share of a pass's rows of a tensor that are rows of it again, at or above which its rows
are examples drawn at random from a pool (pairs drawn anew by the dataset, as pytorch/examples'
siamese_network draws them: as many draws as examples repeat about 37%), not transformed ones,
which repeat none."""
KEPT = 8
"""The most sets of data whose passes are kept (an evaluation of a new dataset each epoch
leaves its last ones behind)."""
TARGET = 16
"""The most values a row of the tensor that shows the same examples came again may hold (a
label, a few regression targets; not an attention mask, which random masking leaves as it
was)."""


@dataclass
class Hashed:
    """A pass over one loader: itself, the line that drew its first batch, each tensor's rows'
    hashes by batch ([B] int64), and each tensor's widths (its trailing shapes, one throughout
    or more)."""

    drawn_from: Pass
    where: str
    rows: list[list[torch.Tensor]] = field(default_factory=list)
    widths: list[set[tuple[int, ...]]] = field(default_factory=list)


class AugmentedEvaluation:
    """``add``: where the finding goes; ``trained_on``: the datasets the clock's steps trained
    on (``Loaders.trained_on``, the same set)."""

    def __init__(self, add: Callable[[Finding], None], trained_on: set[int]) -> None:
        self.add = add
        self.trained_on = trained_on
        self.said = False
        self.passes: dict[int, Hashed] = {}  # by what it draws from: its pass being drawn
        self.whole: dict[int, Hashed] = {}  # by what it draws from: its last whole pass

    def drawn(self, drawn_from: Pass, batch: Any) -> None:
        """``drawn_from``, a loader that draws each example once a pass, gave ``batch``: hashed
        while no step has trained on its dataset (a training loader's pass stops here at its
        first step, and its next batches are not looked at)."""
        if self.said or drawn_from.dataset in self.trained_on:
            drawn_from.whole = False
            self.passes.pop(drawn_from.dataset, None)
            return
        tensors = batch_tensors(batch)
        if not tensors:
            return
        hashed = self.passes.get(drawn_from.dataset)
        if hashed is None or hashed.drawn_from is not drawn_from:
            _keep(self.passes, KEPT - 1)
            hashed = self.passes[drawn_from.dataset] = Hashed(drawn_from, sites.user_site())
            hashed.rows = [[] for _ in tensors]
            hashed.widths = [set() for _ in tensors]
        if len(tensors) != len(hashed.rows):
            del self.passes[drawn_from.dataset]  # (batches of another make-up: not one pass's)
            return
        for x, rows, widths in zip(tensors, hashed.rows, hashed.widths, strict=True):
            rows.append(row_hashes(x.detach().reshape(x.shape[0], -1)))
            widths.add(tuple(x.shape[1:]))
        if drawn_from.batches is not None and len(hashed.rows[0]) == drawn_from.batches:
            key = drawn_from.dataset
            del self.passes[key]
            last = self.whole.pop(key, None)
            _keep(self.whole, KEPT - 1)
            self.whole[key] = hashed
            if last is not None and _same_data(last.drawn_from, drawn_from):
                self._compare(last, hashed)

    def _compare(self, last: Hashed, now: Hashed) -> None:
        """Two whole passes over one loader: the same examples, some inputs drawn anew?"""
        counts = {torch.cat(r).numel() for r in (*last.rows, *now.rows)}
        if len(last.rows) != len(now.rows) or len(counts) != 1:
            return  # (another number of examples: the data changed)
        read = []
        for before, after in zip(last.rows, now.rows, strict=True):
            a, b = torch.cat(before), torch.cat(after)
            ordered = b.sort().values
            same = ~torch.ne(a.sort().values, ordered).any()  # (not ==: wrapped at times)
            twice = 1 - torch.ne(ordered[1:], ordered[:-1]).float().mean()  # rows drawn again
            read.append(torch.stack([torch.isin(b, a).float().mean(), same.float(), twice]))
        shares = torch.stack(read).tolist()
        targets = [math.prod(w) <= TARGET for w in (next(iter(x)) for x in now.widths)]
        if not any(same and target for (_, same, _), target in zip(shares, targets, strict=True)):
            return  # (no targets the same: other examples, a rebuilt set)
        for i, (share, same, twice) in enumerate(shares):
            widths = last.widths[i] | now.widths[i]
            width = next(iter(widths))
            if same or len(widths) != 1 or math.prod(width) < 2 or share >= REPEATED:
                continue
            if twice >= DRAWN:
                continue  # (examples drawn at random from a pool, not transformed)
            self.said = True
            found = evaluation_inputs_random(now.drawn_from.described, i, width, share)
            found.where = now.where
            self.add(found)
            return


def _keep(passes: dict[int, Hashed], most: int) -> None:
    """Drop the oldest of ``passes`` beyond ``most``."""
    while len(passes) > most:
        del passes[next(iter(passes))]


def batch_tensors(batch: Any, depth: int = 2) -> list[torch.Tensor]:
    """The tensors of ``batch`` with a batch dim: itself, or those of its tuples, lists and
    dicts, ``depth`` levels down (``(x, {"label": y})``)."""
    if isinstance(batch, torch.Tensor):
        return given((batch,), None)
    if depth == 0:
        return []
    items = batch.values() if isinstance(batch, Mapping) else batch
    if not isinstance(items, list | tuple) and not isinstance(batch, Mapping):
        return []  # (a Mapping: transformers' BatchEncoding is a UserDict, no dict)
    return [t for item in items for t in batch_tensors(item, depth - 1)]


def _same_data(last: Pass, now: Pass) -> bool:
    """Whether two passes drew from one dataset, alive (not another at a freed one's id)."""
    data = now.data() if now.data is not None else None
    return data is not None and last.data is not None and last.data() is data


def evaluation_inputs_random(
    loader: str, tensor: int, width: tuple[int, ...], share: float
) -> Finding:
    """Two whole passes without gradients over ``loader`` drew the same examples, its
    ``tensor``-th tensor (rows of ``width``) with only ``share`` of its rows found again."""
    return Finding(
        "evaluation-inputs-random",
        "warning",
        f"two evaluation passes over {loader} drew the same examples (a tensor of the batches "
        f"held the same rows both times) but different inputs: of tensor {tensor} "
        f"({list(width)} a row), {share:.0%} of the second pass's rows were in the first. A "
        "random transform (crop, flip, noise, masking) is applied to the evaluation data, so "
        "each evaluation scores inputs drawn at random: its score is lower than the model's on "
        "the data as they are, and moves from one evaluation to the next by chance (random_split "
        "of a dataset built with the training transform gives the validation Subset that "
        "transform too)",
        evidence={
            "loader": loader,
            "tensor": tensor,
            "width": list(width),
            "found": round(share, 3),
        },
    )

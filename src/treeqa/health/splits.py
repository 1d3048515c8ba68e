"""``splits-overlap``: an evaluation's DataLoader whose rows are partly the training
DataLoader's, the two split from one dataset, so the validation score counts rows the model
trained on.

``train, _ = random_split(data, [0.8, 0.2])`` and then ``_, val = random_split(data, [0.8,
0.2])``, each call a new permutation, share about 80% of ``val`` with ``train``; so do two
``torch.randperm(n)`` taken for the two index lists, and index ranges that overlap
(``idx[:900]``, ``idx[800:]``). Nothing fails: the validation accuracy rises with the training
accuracy, and the model chosen by it is the one that overfits most.

A DataLoader's split is read at its first pass, when its iterator is made and the model's next
forward shows what it is for (a forward of a model the clock trains, in train mode with gradients on: a
training loader; any other: an evaluation's): the dataset under its ``Subset``\\ s (and a
``ConcatDataset`` of parts of one dataset) and the rows of it they keep (and those of a
``SubsetRandomSampler``), or, for a ``TensorDataset`` of
slices of one tensor, that tensor's memory and the rows the slices start at. An evaluation
loader's rows, given by index, are compared with those of the latest training loader of the
clock, over the same dataset (``torch.isin``, once a pair: the latest, so that a k-fold loop's
fold is compared with its own training rows, not an earlier fold's): ``OVERLAP`` rows or more in
common, ``SHARE`` of its rows or more, and ``OVERLAP`` or more of its own (an evaluation of rows
all among the training ones scores the training data on purpose, and one over the whole
dataset is no held-out split) make the finding, at the line that made the evaluation's
iterator.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import ConcatDataset, DataLoader, Subset, SubsetRandomSampler, TensorDataset

from treeqa.health import sites
from treeqa.health.findings import Finding

OVERLAP = 5
"""Rows an evaluation shares with a training split, and rows of its own, at least."""
SHARE = 0.01
"""The least share of an evaluation's rows among a training split's."""
DEPTH = 8
"""Subsets and concatenations inside one another read through."""


@dataclass
class Split:
    base: tuple[int, int]  # the dataset (its id), or a tensor's memory and row stride
    rows: torch.Tensor | None  # the base's rows it reads (None: all of them)
    kind: str  # the base's class
    loader: int  # id of the DataLoader


class Splits:
    """``add``: where the finding goes."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        # a loader whose iterator was made, and where, until the model's next forward
        self.pending: tuple[weakref.ref[DataLoader[Any]], str] | None = None
        self.trained: Split | None = None  # the latest training loader's, this clock's
        self.judged: set[tuple[int, int]] = set()  # (evaluation, training) loaders compared
        # each loader's split, read at its first pass (weak: a loader made an epoch is freed)
        self.known: weakref.WeakKeyDictionary[DataLoader[Any], Split | None] = (
            weakref.WeakKeyDictionary()
        )
        self.said = False

    def made(self, loader: DataLoader[Any]) -> None:
        """An iterator over ``loader`` is made."""
        if not self.said:
            self.pending = (weakref.ref(loader), sites.user_site())

    def reset(self) -> None:
        """A new clock: its training loaders are yet to come."""
        self.trained = self.pending = None

    def forward(self, training: bool) -> None:
        """The first forward of a model the clock trains since an iterator was made: in train
        mode with gradients on (``training``) or not."""
        pending, self.pending = self.pending, None
        loader = pending[0]() if pending is not None else None
        if loader is None or pending is None:
            return
        if training:
            self.trained = self._split_of(loader) or self.trained
            return
        trained = self.trained
        if trained is None or (id(loader), trained.loader) in self.judged:
            return
        split = self._split_of(loader)
        if split is None:
            return
        self.judged.add((split.loader, trained.loader))
        if trained.base != split.base or split.rows is None:
            return  # (an evaluation over the whole dataset: no held-out split)
        if trained.rows is None:
            return  # (all of it trained: an evaluation within the training data)
        shared = int(torch.isin(split.rows, trained.rows).sum())
        own = len(split.rows) - shared
        if shared >= max(OVERLAP, SHARE * len(split.rows)) and own >= OVERLAP:
            self.said = True
            self.add(_finding(split, trained, shared, pending[1]))

    def _split_of(self, loader: DataLoader[Any]) -> Split | None:
        """``loader``'s split, read at its first pass."""
        if loader not in self.known:
            self.known[loader] = _split(loader)
        return self.known[loader]


def _split(loader: DataLoader[Any]) -> Split | None:
    r"""The dataset ``loader`` reads rows of, and which rows (its sampler's, through its
    ``Subset``\ s)."""
    try:
        base, rows, kind = _rows(loader.dataset, DEPTH)
        sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
        if isinstance(sampler, SubsetRandomSampler):
            drawn = torch.as_tensor(list(sampler.indices), dtype=torch.long)
            rows = drawn if rows is None else rows[drawn]
    except (TypeError, ValueError, IndexError, RuntimeError):  # indices of another kind
        return None
    return Split(base, rows, kind, id(loader))


def _rows(dataset: Any, depth: int) -> tuple[tuple[int, int], torch.Tensor | None, str]:
    r"""(what ``dataset``'s rows are rows of, which of them (None: all), its class): under
    ``Subset``\ s and a ``ConcatDataset`` of parts of one dataset (``depth`` down), the
    dataset itself; a ``TensorDataset`` of slices of one tensor, that tensor's memory."""
    if depth and isinstance(dataset, Subset):
        base, rows, kind = _rows(dataset.dataset, depth - 1)
        kept = torch.as_tensor(list(dataset.indices), dtype=torch.long)
        return base, kept if rows is None else rows[kept], kind
    if depth and isinstance(dataset, ConcatDataset) and dataset.datasets:
        parts = [_rows(part, depth - 1) for part in dataset.datasets]
        if len({base for base, _, _ in parts}) == 1:
            ends = dataset.cumulative_sizes
            sizes = [end - start for start, end in zip([0, *ends], ends, strict=False)]
            every = [
                torch.arange(size) if rows is None else rows
                for size, (_, rows, _) in zip(sizes, parts, strict=True)
            ]
            return parts[0][0], torch.cat(every), parts[0][2]
    if isinstance(dataset, TensorDataset) and dataset.tensors:
        # slices of one tensor (data[:900], data[800:]) are rows of its memory
        t = dataset.tensors[0]
        if t.dim() and t.stride(0) > 0 and t.storage_offset() % t.stride(0) == 0:
            memory = t.untyped_storage()
            base = (memory.data_ptr(), t.stride(0) * t.element_size())
            first = t.storage_offset() // t.stride(0)
            if first == 0 and len(t) * base[1] == memory.nbytes():  # the whole tensor
                return base, None, type(dataset).__name__
            return base, torch.arange(len(t)) + first, type(dataset).__name__
    return (id(dataset), 0), None, type(dataset).__name__


def _finding(evaluated: Split, trained: Split, shared: int, where: str) -> Finding:
    rows = 0 if evaluated.rows is None else len(evaluated.rows)
    of = 0 if trained.rows is None else len(trained.rows)
    return Finding(
        "splits-overlap",
        "warning",
        f"the evaluation's DataLoader reads {rows} rows of a {evaluated.kind}, {shared} of "
        f"them among the {of} the training DataLoader reads from it: the two were split from "
        "one dataset so that they overlap (random_split called twice, each a new "
        "permutation; two torch.randperm taken for the two index lists; index ranges that "
        "overlap), and the validation score counts rows the model trained on",
        where=where,
        evidence={"evaluated_rows": rows, "shared": shared, "trained_rows": of},
    )

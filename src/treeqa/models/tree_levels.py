"""The level schedule the tree models run on.

A tree model runs the forest one height at a time (``TreeBatch.levels``): it reads the states
of a level's children by index, computes the level, and writes its states. ``LevelOrder``
renumbers the forest so that each level is one slice of a state table. The tree models run
their inner levels inside one autograd function with the backward written out: letting
autograd record ~20 small operations per level cost as much as the arithmetic on a CPU, and
the weight gradients become one matmul over the whole forest instead of one per level.

Shape letters: N nodes in the forest, M inner nodes, K children per node (padded), L nodes in
one level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from treeqa.data.batching import TreeBatch


@dataclass(frozen=True)
class LevelOrder:
    """The forest in level order: leaves first, then each height (M inner nodes, K slots)."""

    sizes: list[int]  # nodes per level, leaves first
    kids: torch.Tensor  # [M, K] level-order positions of each inner node's children (N = none)
    child_ids: torch.Tensor  # [M, K] the same children as node ids (N = none)
    order: torch.Tensor  # [N] node id at each position
    position: torch.Tensor  # [N] position of each node id

    @classmethod
    def of(cls, batch: TreeBatch, arity: int | None = None) -> LevelOrder:
        n = batch.words.shape[0]
        order = torch.cat(batch.levels)  # [N]
        position = torch.empty(n + 1, dtype=torch.long, device=order.device)  # [N + 1]
        position[order] = torch.arange(n, device=order.device)
        position[n] = n  # "no child" stays the zero row
        sizes = [int(level.shape[0]) for level in batch.levels]
        child_ids = child_slots(batch, arity).index_select(0, order[sizes[0] :])  # [M, K]
        return cls(sizes, position[child_ids], child_ids, order, position[:n])

    @property
    def leaves(self) -> torch.Tensor:
        """[L0] node ids of the leaves, in level order."""
        return self.order[: self.sizes[0]]

    @property
    def inner(self) -> torch.Tensor:
        """[M] node ids of the inner nodes, level by level."""
        return self.order[self.sizes[0] :]

    def levels(
        self, inner: list[torch.Tensor], tables: list[torch.Tensor]
    ) -> list[tuple[torch.Tensor, ...]]:
        """Per inner level, bottom up: its children [L, K], then each [M, ...] tensor of
        ``inner`` and each [N + 1, ...] table of ``tables`` cut to the level's rows."""
        sizes = self.sizes[1:]
        parts = [self.kids.split(sizes)]
        parts += [t.split(sizes) for t in inner]
        parts += [t[:-1].split(self.sizes)[1:] for t in tables]
        return list(zip(*parts, strict=True))


@dataclass(frozen=True)
class ChildSlots:
    """The forest's real child slots, S in all (one per non-root node), with no padding to
    the widest node. Ordered as a model that steps through each node's children in turn
    visits them (the Tree-GRU): level by level, then step i of the level, then the level's
    nodes that have an i-th child. Those nodes are a prefix of the level
    (``TreeBatch.level_steps``), so step i updates the first n_i states of the level and the
    others keep theirs, with no masks. The Child-Sum Tree-LSTM sums over the same slots.
    """

    steps: list[tuple[int, ...]]  # per inner level: n_i, its nodes with an i-th child
    position: torch.Tensor  # [S] level-order position of the slot's child
    child: torch.Tensor  # [S] node id of the slot's child
    parent: torch.Tensor  # [S] node id of the slot's parent
    row: torch.Tensor  # [S] the parent's row within its level

    @classmethod
    def of(cls, batch: TreeBatch, plan: LevelOrder) -> ChildSlots:
        steps = list(batch.level_steps[1:])
        k = plan.kids.shape[1]
        start, flat, rows = 0, [], []  # each slot's index into the [M, K] child tables
        for size, level in zip(plan.sizes[1:], steps, strict=True):
            for i, n in enumerate(level):  # step i: the level's first n nodes, child i
                rows.append(np.arange(n))
                flat.append((start + rows[-1]) * k + i)
            start += size
        empty = [np.zeros(0, np.int64)]
        index, row = (
            torch.from_numpy(np.concatenate(a or empty)).to(plan.kids.device) for a in (flat, rows)
        )  # [S] each
        parent = plan.inner.index_select(0, torch.div(index, k, rounding_mode="floor"))
        return cls(steps, plan.kids.view(-1)[index], plan.child_ids.view(-1)[index], parent, row)

    def levels(self, slotted: list[torch.Tensor]) -> list[tuple[torch.Tensor, ...]]:
        """Per inner level, bottom up: its slots' ``position`` and ``row``, then each [S, ...]
        tensor of ``slotted``, all cut to the level's slots (in step order; ``steps`` splits
        them further)."""
        sizes = [sum(level) for level in self.steps]
        cut = [self.position, self.row, *slotted]
        return list(zip(*(t.split(sizes) for t in cut), strict=True))


def run_forest(
    forest: type[torch.autograd.Function],
    states: Sequence[torch.Tensor | None],
    dtype: torch.dtype,
    *rest: Any,
) -> torch.Tensor:
    """``forest.apply(*states, *rest)`` outside autocast, ``states`` (the activations computed
    before the levels) cast to ``dtype``, the weights' precision: under autocast they may come
    out in bfloat16, and the levels are launch-bound on a GPU, not matmul-bound."""
    device = next(s for s in states if s is not None).device.type
    with torch.autocast(device, enabled=False):
        cast = [None if s is None else s.to(dtype) for s in states]
        out: torch.Tensor = forest.apply(*cast, *rest)
    return out


def child_slots(batch: TreeBatch, arity: int | None = None) -> torch.Tensor:
    """[N, K] child indices with "no child" (-1) pointing at row N, the zero-state row.

    With ``arity``, K is padded to it (a batch of single leaves has K = 1) and wider nodes
    are an error.
    """
    n = batch.words.shape[0]
    kids = batch.children.masked_fill(batch.children < 0, n)  # [N, K]
    if arity is not None:
        if kids.shape[1] > arity:
            raise ValueError(
                f"this model takes trees with at most {arity} children per node, got "
                f"{kids.shape[1]}; use the Child-Sum Tree-LSTM (--model childsum) for any fan-out"
            )
        if kids.shape[1] < arity:
            kids = torch.cat([kids, kids.new_full((n, arity - kids.shape[1]), n)], 1)
    return kids

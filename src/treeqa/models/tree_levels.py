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
    arity: list[int]  # per inner level, the most children of one of its nodes (<= K)

    @classmethod
    def of(cls, batch: TreeBatch, arity: int | None = None) -> LevelOrder:
        n = batch.words.shape[0]
        order = torch.cat(batch.levels)  # [N]
        position = torch.empty(n + 1, dtype=torch.long, device=order.device)  # [N + 1]
        position[order] = torch.arange(n, device=order.device)
        position[n] = n  # "no child" stays the zero row
        sizes = [int(level.shape[0]) for level in batch.levels]
        child_ids = child_slots(batch, arity).index_select(0, order[sizes[0] :])  # [M, K]
        k = child_ids.shape[1]
        widest = list(batch.level_arity[1:]) or [k] * (len(sizes) - 1)
        return cls(sizes, position[child_ids], child_ids, order, position[:n], widest)

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

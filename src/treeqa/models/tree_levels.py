"""The level schedule the tree models run on.

A tree model runs the forest one height at a time (``TreeBatch.levels``): it reads the states
of a level's children by index, computes the level, and writes its states. ``LevelOrder``
renumbers the forest so that each level is one slice of a state table. The tree models run
their inner levels inside one autograd function with the backward written out: letting
autograd record ~20 small operations per level cost as much as the arithmetic on a CPU, and
the weight gradients become one matmul over the whole forest instead of one per level.

Shape letters: N nodes in the forest, M inner nodes, A children per node of a fixed-arity
model (padded), S child slots (one per non-root node), L nodes in one level.
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
    """The forest in level order: leaves first, then each height (M inner nodes)."""

    sizes: list[int]  # nodes per level, leaves first
    order: torch.Tensor  # [N] node id at each position
    position: torch.Tensor  # [N] position of each node id

    @classmethod
    def of(cls, batch: TreeBatch) -> LevelOrder:
        n = batch.words.shape[0]
        order = torch.cat(batch.levels)  # [N]
        position = torch.empty(n, dtype=torch.long, device=order.device)  # [N]
        position[order] = torch.arange(n, device=order.device)
        return cls([int(level.shape[0]) for level in batch.levels], order, position)

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
        """Per inner level, bottom up: each [M, ...] tensor of ``inner`` and each [N + 1, ...]
        table of ``tables`` cut to the level's rows."""
        sizes = self.sizes[1:]
        parts = [t.split(sizes) for t in inner]
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
        start, inner, rows, step = 0, [], [], []  # each slot's parent row, in [M] and its level
        for size, level in zip(plan.sizes[1:], steps, strict=True):
            for i, n in enumerate(level):  # step i: the level's first n nodes, child i
                rows.append(np.arange(n))
                inner.append(start + rows[-1])
                step.append(np.full(n, i))
            start += size
        empty = [np.zeros(0, np.int64)]
        inner_row, row, step_of = (
            torch.from_numpy(np.concatenate(a or empty)).to(plan.order.device)
            for a in (inner, rows, step)
        )  # [S] each
        parent = plan.inner.index_select(0, inner_row)
        first = batch.child_start.index_select(0, parent)  # [S] where the parent's children start
        child = batch.child_index.index_select(0, first + step_of)
        return cls(steps, plan.position.index_select(0, child), child, parent, row)

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


def fixed_children(batch: TreeBatch, plan: LevelOrder, arity: int) -> torch.Tensor:
    """[M, A] level-order positions of each inner node's children, A = ``arity``; a node with
    fewer has N, the zero-state row, in its empty slots. A wider node is an error."""
    widest = max(len(steps) for steps in batch.level_steps)  # host ints: no device sync
    if widest > arity:
        raise ValueError(
            f"this model takes trees with at most {arity} children per node, got {widest}; "
            "use the Child-Sum Tree-LSTM (--model childsum) for any fan-out"
        )
    n, inner = batch.words.shape[0], plan.inner
    first = batch.child_start[inner, None]  # [M, 1]
    count = batch.child_start[inner + 1, None] - first  # [M, 1]
    slot = torch.arange(arity, device=inner.device)  # [A]
    last = max(batch.child_index.shape[0] - 1, 0)
    child = batch.child_index[(first + slot).clamp_(max=last)]  # [M, A], clamped past the end
    return torch.where(slot < count, plan.position[child], n)
